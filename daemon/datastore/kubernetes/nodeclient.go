package kubernetes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// NodeClient is the part of the Kubernetes API the datastore uses: list,
// watch and patch Nodes. client-go's typed NodeInterface (e.g. a fake
// clientset's CoreV1().Nodes()) satisfies it.
type NodeClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// nodeClient is the daemon's NodeClient: client-go's REST client with a
// scheme of core/v1 alone. client-go's clientset would do the same calls,
// but linking it registers every API group's types at start, which costs
// the daemon about 9 MiB of RSS whatever its datastore.
type nodeClient struct {
	rc     *rest.RESTClient
	params runtime.ParameterCodec
}

// NewNodeClient returns the NodeClient of rc's API server. It asks for
// protobuf (smaller and cheaper to decode than JSON, as kubelet and
// kube-proxy ask) and takes JSON where protobuf is not served.
func NewNodeClient(rc *rest.Config) (NodeClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("core/v1 scheme: %w", err)
	}
	c := rest.CopyConfig(rc)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &nodeClient{rc: client, params: runtime.NewParameterCodec(scheme)}, nil
}

// timeout is a list or watch call's server-side timeout as a client one.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds != nil {
		return time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	return 0
}

// List lists Nodes.
func (c *nodeClient) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := c.rc.Get().Resource("nodes").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch watches Nodes.
func (c *nodeClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource("nodes").VersionedParams(&opts, c.params).Timeout(timeout(opts)).Watch(ctx)
}

// Patch patches a Node (or its subresource, e.g. "status").
func (c *nodeClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rc.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...).VersionedParams(&opts, c.params).Body(data).Do(ctx).Into(out)
	return out, err
}
