// Package kubernetes is the Kubernetes datastore: the cluster's Node
// objects are the node records. This node's blocks are its Node's
// spec.podCIDRs (kube-controller-manager's node IPAM); what peers need of
// this node is published as annotations under routelet.io/ on its Node;
// every other Node with podCIDRs is a peer. One informer on Nodes, with a
// transform that keeps only what routelet reads, serves all of it: after
// the first list the datastore answers from that cache, so an API outage
// leaves the last known peers in place. See docs/design.md "Datastores".
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/peers"
)

// AnnotationPrefix prefixes every annotation routelet writes on a Node.
const AnnotationPrefix = "routelet.io/"

// The annotations that carry a node's published values (one value each;
// a value the node does not have is absent).
const (
	AnnotationHostIPv4   = AnnotationPrefix + "host-ipv4"
	AnnotationHostIPv6   = AnnotationPrefix + "host-ipv6"
	AnnotationVTEPMAC    = AnnotationPrefix + "vtep-mac"
	AnnotationVTEPMACv6  = AnnotationPrefix + "vtep-mac-v6"
	AnnotationTunnelIPv4 = AnnotationPrefix + "tunnel-ipv4"
	AnnotationTunnelIPv6 = AnnotationPrefix + "tunnel-ipv6"
	// The WireGuard public key (base64) and listen port (decimal; absent
	// for the default, 51820).
	AnnotationWireGuardPublicKey = AnnotationPrefix + "wireguard-public-key"
	AnnotationWireGuardPort      = AnnotationPrefix + "wireguard-port"
	// The BGP AS number (decimal), with bgp on.
	AnnotationBGPAS = AnnotationPrefix + "bgp-as"
)

// Annotations lists the published annotation keys.
var Annotations = []string{AnnotationHostIPv4, AnnotationHostIPv6, AnnotationVTEPMAC, AnnotationVTEPMACv6, AnnotationTunnelIPv4, AnnotationTunnelIPv6,
	AnnotationWireGuardPublicKey, AnnotationWireGuardPort, AnnotationBGPAS}

// AnnotationBGPPeers holds the BGP peers an operator set for the node
// (its ToR routers): peers.ParseBGPPeer specs separated by ';'. routelet
// reads it on its own Node only and never writes or removes it (it is
// not in Annotations, the keys the publisher patches).
const AnnotationBGPPeers = AnnotationPrefix + "bgp-peers"

// ConditionReason is the reason routelet sets on the Node's
// NetworkUnavailable condition when it sets it to False.
const ConditionReason = "RouteletIsUp"

// Options configure a Datastore.
type Options struct {
	// Client talks to the API server: NewNodeClient's, or a fake
	// clientset's CoreV1().Nodes().
	Client NodeClient
	// NodeName is this node's Node.
	NodeName string
	// Logger; nil is slog.Default().
	Logger *slog.Logger
	// Backoff bounds the retry delay of failed patches (first retry after
	// a second, doubling up to Backoff); 0 is 30 s.
	Backoff time.Duration
}

// Datastore is the Kubernetes datastore of one node.
type Datastore struct {
	opts     Options
	log      *slog.Logger
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandlerRegistration // onNode's
	cancel   context.CancelFunc
	done     chan struct{} // the informer, the publisher and whenSynced stopped

	apiErrors *prometheus.CounterVec // label op: list-watch | patch | patch-status
	errCounts map[string]int         // apiErrors' counts, by op (guarded by mu)
	patches   *prometheus.CounterVec // label op

	kick chan struct{} // wakes the publisher
	// sentOn is our cached Node the publisher last patched from: while
	// the cache still holds that object, the patch has not come back
	// through the watch and is not sent again.
	sentOn *cachedNode

	// pmu guards the peers (their cached Nodes, which hold their records
	// and are never changed once cached), which onNode keeps sorted by
	// name, and the Watch callbacks it wakes.
	pmu         sync.Mutex
	recs        []*cachedNode
	out         []peers.Record // what Peers hands out, filled again by each call
	watchers    map[int]func()
	nextWatcher int

	// ownPeers is our Node's bgp-peers annotation as onNode last saw it
	// ("" absent, or our Node gone); guarded by pmu.
	ownPeers string

	mu      sync.Mutex
	ownSeen chan struct{} // closed (and replaced) when our Node changes
	self    map[string]string
	hasSelf bool
	ready   bool  // the dataplane is up: NetworkUnavailable should be False
	apiDown bool  // the last list or watch failed
	apiErr  error // the last list or watch error
}

var (
	_ datastore.Datastore     = (*Datastore)(nil)
	_ datastore.ReadyReporter = (*Datastore)(nil)
	_ datastore.NodeBGPPeers  = (*Datastore)(nil)
	_ prometheus.Collector    = (*Datastore)(nil)
)

// apiResult counts and logs a list or watch call's error (the first of an
// outage at warn, the rest at debug, the recovery at info) and returns it.
// The informer retries with backoff and keeps its cache meanwhile.
func (d *Datastore) apiResult(ctx context.Context, call string, err error) error {
	if err != nil && ctx.Err() != nil {
		return err // stopping
	}
	d.mu.Lock()
	was := d.apiDown
	d.apiDown, d.apiErr = err != nil, err
	d.mu.Unlock()
	switch {
	case err != nil:
		d.apiError("list-watch")
		if !was {
			d.log.Warn("cannot "+call+" Nodes: keeping the last known peers and the dataplane, retrying with backoff", "err", err)
		} else {
			d.log.Debug("cannot "+call+" Nodes, retrying", "err", err)
		}
	case was:
		d.log.Info("the Kubernetes API answers again", "call", call)
	}
	return err
}

// ClientConfig returns the API server's client configuration: kubeconfig's
// when a path is given, else the in-cluster one (the pod's service
// account).
func ClientConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		// client-go reads it whole: bound it first.
		if err := readlimit.CheckFile(kubeconfig, 1<<20); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes config (give --kubeconfig outside a pod): %w", err)
	}
	return c, nil
}

// New starts the datastore's informer on Nodes; it runs until Close.
func New(opts Options) (*Datastore, error) {
	if opts.Client == nil {
		return nil, errors.New("kubernetes datastore: no client")
	}
	if opts.NodeName == "" {
		return nil, errors.New("kubernetes datastore: no node name")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 30 * time.Second
	}
	d := &Datastore{
		opts: opts, log: opts.Logger, done: make(chan struct{}), kick: make(chan struct{}, 1), ownSeen: make(chan struct{}),
		watchers: map[int]func(){},
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routelet_kubernetes_api_errors_total", Help: "Failed Kubernetes API calls of the Kubernetes datastore (retried with backoff).",
		}, []string{"op"}),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routelet_kubernetes_patches_total", Help: "Patches the Kubernetes datastore sent to this node's Node.",
		}, []string{"op"}),
	}
	d.errCounts = map[string]int{}
	for _, op := range []string{"list-watch", "patch", "patch-status"} {
		d.apiErrors.WithLabelValues(op)
		d.errCounts[op] = 0
	}
	for _, op := range []string{"patch", "patch-status"} {
		d.patches.WithLabelValues(op)
	}
	d.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := opts.Client.List(ctx, o)
			return l, d.apiResult(ctx, "list", err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := opts.Client.Watch(ctx, o)
			return w, d.apiResult(ctx, "watch", err)
		},
	}, opts.Client), &corev1.Node{}, 0, cache.Indexers{})
	if err := d.informer.SetTransform(Transform); err != nil {
		return nil, fmt.Errorf("kubernetes datastore: %w", err)
	}
	handler, err := d.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.onNode(obj, false) },
		UpdateFunc: func(_, obj any) { d.onNode(obj, false) },
		DeleteFunc: func(obj any) { d.onNode(obj, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("kubernetes datastore: %w", err)
	}
	d.handler = handler
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); d.informer.RunWithContext(ctx) }()
	go func() { defer wg.Done(); d.publisher(ctx) }()
	go func() { defer wg.Done(); d.whenSynced(ctx) }()
	go func() { wg.Wait(); close(d.done) }()
	return d, nil
}

// Close stops the informer and the publisher.
func (d *Datastore) Close() error {
	d.cancel()
	<-d.done
	return nil
}

// whenSynced wakes LocalBlocks, the publisher and the watchers once the
// first list has gone through onNode: the events of that list may have
// come before it was complete, when Peers and LocalBlocks still refused to
// answer, and nothing else follows them.
func (d *Datastore) whenSynced(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-d.handler.HasSyncedChecker().Done():
	}
	d.ownChanged()
	d.pmu.Lock()
	wake := d.watching()
	d.pmu.Unlock()
	for _, w := range wake {
		w()
	}
}

// watching returns the Watch callbacks; d.pmu is held.
func (d *Datastore) watching() []func() {
	out := make([]func(), 0, len(d.watchers))
	for _, w := range d.watchers {
		out = append(out, w)
	}
	return out
}

// ownChanged wakes LocalBlocks and the publisher after our Node changed.
func (d *Datastore) ownChanged() {
	d.mu.Lock()
	close(d.ownSeen)
	d.ownSeen = make(chan struct{})
	d.mu.Unlock()
	d.wake()
}

// wake kicks the publisher without blocking.
func (d *Datastore) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// LocalBlocks returns our Node's spec.podCIDRs once it has any; until then
// it calls waiting and waits for the Node to change.
func (d *Datastore) LocalBlocks(ctx context.Context, waiting func(reason string)) ([]netip.Prefix, error) {
	for {
		d.mu.Lock()
		seen, apiErr := d.ownSeen, d.apiErr
		d.mu.Unlock()
		var reason string
		if !d.handler.HasSynced() {
			reason = fmt.Sprintf("waiting for spec.podCIDRs on node %s: Nodes not listed from the API server yet", d.opts.NodeName)
			if apiErr != nil {
				reason += ": " + apiErr.Error()
			}
		} else if n, err := d.cached(d.opts.NodeName); err != nil {
			reason = fmt.Sprintf("waiting for spec.podCIDRs on node %s: %v", d.opts.NodeName, err)
		} else if len(n.record.Blocks) == 0 {
			reason = fmt.Sprintf("waiting for spec.podCIDRs on node %s", d.opts.NodeName)
		} else {
			return parseBlocks(n.Name, n.record.Blocks)
		}
		waiting(reason)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-seen:
		case <-time.After(time.Second): // an API error has no event of its own: say it
		}
	}
}

// parseBlocks parses a Node's podCIDRs into pod blocks, refusing any that
// cannot be one (named in the error).
func parseBlocks(node string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("node %s: spec.podCIDRs %q: %w", node, s, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("node %s: spec.podCIDRs %q: host bits set (want %s)", node, s, p.Masked())
		}
		if err := nodespace.CheckBlock(p); err != nil {
			return nil, fmt.Errorf("node %s: spec.podCIDRs %q: %w", node, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// podCIDRs returns a Node's pod CIDRs (spec.podCIDR alone on old objects).
func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// Publish records our values; the publisher patches them onto our Node
// whenever they differ from the Node's annotations, now and later.
func (d *Datastore) Publish(self peers.Record) error {
	d.mu.Lock()
	d.self = annotationsOf(self)
	d.hasSelf = true
	d.mu.Unlock()
	d.wake()
	return nil
}

// SetReady reports the dataplane's readiness: while ready, the Node's
// NetworkUnavailable condition is kept False (set again if anything else
// changes it, or the Node is created again). Not ready changes nothing:
// the dataplane stays in place (also when the daemon stops).
func (d *Datastore) SetReady(ready bool, _ string) {
	d.mu.Lock()
	changed := ready && !d.ready
	d.ready = ready
	d.mu.Unlock()
	if changed {
		d.wake()
	}
}

// annotationsOf maps a record to its annotations ("" values absent).
func annotationsOf(r peers.Record) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{
		AnnotationHostIPv4: r.HostIPv4, AnnotationHostIPv6: r.HostIPv6,
		AnnotationVTEPMAC: r.VTEPMAC, AnnotationVTEPMACv6: r.VTEPMACv6,
		AnnotationTunnelIPv4: r.TunnelIPv4, AnnotationTunnelIPv6: r.TunnelIPv6,
		AnnotationWireGuardPublicKey: r.WireGuardPublicKey, AnnotationWireGuardPort: r.WireGuardPort,
		AnnotationBGPAS: r.BGPAS,
	} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// publisher keeps our annotations and the NetworkUnavailable condition as
// wanted: it patches when the cached Node differs (so nothing is sent when
// nothing changed), retrying failures with backoff.
func (d *Datastore) publisher(ctx context.Context) {
	const first = time.Second
	delay := first
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-retry:
		}
		retry = nil
		if !d.informer.HasSynced() {
			retry = time.After(100 * time.Millisecond)
			continue
		}
		if err := d.sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("cannot update this node's Node, retrying", "node", d.opts.NodeName, "in", delay, "err", err)
			retry = time.After(delay)
			delay = min(2*delay, d.opts.Backoff)
			continue
		}
		delay = first
	}
}

// sync sends the patches our Node needs, if any.
func (d *Datastore) sync(ctx context.Context) error {
	d.mu.Lock()
	want, hasSelf, ready := d.self, d.hasSelf, d.ready
	d.mu.Unlock()
	n, err := d.cached(d.opts.NodeName)
	if err != nil {
		return err
	}
	if n == d.sentOn {
		return nil // our last patch is not back yet; its echo wakes us
	}
	sent := false
	if hasSelf {
		patch, err := annotationPatch(n.annotations(), want)
		if err != nil {
			return err
		}
		if patch != nil {
			if _, err := d.opts.Client.Patch(ctx, d.opts.NodeName, mergePatch, patch, metav1.PatchOptions{}); err != nil {
				d.apiError("patch")
				return fmt.Errorf("patch annotations of node %s: %w", d.opts.NodeName, err)
			}
			sent = true
			d.patches.WithLabelValues("patch").Inc()
			d.log.Info("published this node's values as annotations", "node", d.opts.NodeName, "patch", string(patch))
		}
	}
	if ready && !n.networkAvailable {
		if err := d.patchCondition(ctx); err != nil {
			d.apiError("patch-status")
			return err
		}
		sent = true
		d.patches.WithLabelValues("patch-status").Inc()
		d.log.Info("set NetworkUnavailable=False on this node", "node", d.opts.NodeName, "reason", ConditionReason)
	}
	if sent {
		d.sentOn = n
	}
	return nil
}

// NetworkAvailable reports whether a Node carries NetworkUnavailable=False
// with routelet's reason.
func NetworkAvailable(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse && c.Reason == ConditionReason
		}
	}
	return false
}

// Watch calls changed whenever another Node appears, goes, or changes in
// what its record holds, and when our Node's bgp-peers annotation changes
// (kubelet's status updates alone do not wake the daemon), until ctx is
// done; and once now, for what came before.
func (d *Datastore) Watch(ctx context.Context, changed func()) error {
	d.pmu.Lock()
	id := d.nextWatcher
	d.nextWatcher++
	d.watchers[id] = changed
	d.pmu.Unlock()
	go func() {
		<-ctx.Done()
		d.pmu.Lock()
		delete(d.watchers, id)
		d.pmu.Unlock()
	}()
	changed()
	return nil
}

// onNode keeps the peer records in step with the informer's cache: it is
// the informer's handler for every Node event (gone: a delete). A change
// to a record wakes the watchers after the records hold it, so their Peers
// call sees it; an event that changes no record (a kubelet status update)
// wakes nobody.
func (d *Datastore) onNode(obj any, gone bool) {
	n, ok := nodeOf(obj)
	if !ok {
		return
	}
	if n.Name == d.opts.NodeName {
		d.ownChanged()
		peersNow := n.bgpPeers
		if gone {
			peersNow = ""
		}
		d.pmu.Lock()
		if peersNow == d.ownPeers {
			d.pmu.Unlock()
			return
		}
		d.ownPeers = peersNow
		wake := d.watching()
		d.pmu.Unlock()
		for _, w := range wake {
			w()
		}
		return
	}
	isPeer := !gone && len(n.record.Blocks) > 0
	d.pmu.Lock()
	i, found := slices.BinarySearchFunc(d.recs, n.Name, func(c *cachedNode, name string) int { return strings.Compare(c.Name, name) })
	switch {
	case isPeer && found:
		same := d.recs[i].record.Equal(n.record)
		d.recs[i] = n // the cache's own, whether or not the record changed
		if same {
			d.pmu.Unlock()
			return
		}
	case isPeer:
		d.recs = slices.Insert(d.recs, i, n)
	case found:
		d.recs = slices.Delete(d.recs, i, i+1)
	default:
		d.pmu.Unlock()
		return
	}
	wake := d.watching()
	d.pmu.Unlock()
	for _, w := range wake {
		w()
	}
}

// Peers returns a record for every other Node with podCIDRs, sorted by
// name, as the informer last delivered them: an API outage leaves the last
// listed Nodes. The records are kept as the Nodes change (onNode), so a
// call converts no Node; it copies the records into a slice that stays
// as it is until the next call, which fills it again (the daemon's loop,
// the one caller, validates them in between: a peer change allocates no
// list of every peer). The records' Blocks are the cache's: read them, do
// not modify them.
// Before the first list it is an error (the daemon keeps what it has).
func (d *Datastore) Peers() ([]peers.Record, []error, error) {
	if !d.handler.HasSynced() {
		return nil, nil, errors.New("Nodes not listed from the API server yet")
	}
	d.pmu.Lock()
	defer d.pmu.Unlock()
	out := d.out[:0]
	if n := len(d.recs); cap(out) < n {
		out = make([]peers.Record, 0, n+n/16)
	}
	for _, n := range d.recs {
		out = append(out, n.record)
	}
	clear(out[len(out):cap(out)]) // hold no record a longer list had
	d.out = out
	return out, nil, nil
}

// OwnBGPPeers implements datastore.NodeBGPPeers: the specs of our Node's
// routelet.io/bgp-peers annotation as the informer last delivered it,
// split at ';' (white space around each trimmed, empty ones dropped);
// none when it is absent. Before the first list, or while our Node is not
// in the cache, it is an error.
func (d *Datastore) OwnBGPPeers() ([]string, error) {
	if !d.handler.HasSynced() {
		return nil, errors.New("Nodes not listed from the API server yet")
	}
	n, err := d.cached(d.opts.NodeName)
	if err != nil {
		return nil, err
	}
	return SplitBGPPeers(n.bgpPeers), nil
}

// SplitBGPPeers splits a routelet.io/bgp-peers value into its specs.
func SplitBGPPeers(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Record is the node record of a Node: its annotations, the InternalIP of
// each family where the host IP annotation is absent, and its podCIDRs.
func Record(n *corev1.Node) peers.Record {
	a := n.Annotations
	r := peers.Record{
		Name: n.Name, HostIPv4: a[AnnotationHostIPv4], HostIPv6: a[AnnotationHostIPv6],
		VTEPMAC: a[AnnotationVTEPMAC], VTEPMACv6: a[AnnotationVTEPMACv6],
		TunnelIPv4: a[AnnotationTunnelIPv4], TunnelIPv6: a[AnnotationTunnelIPv6],
		WireGuardPublicKey: a[AnnotationWireGuardPublicKey], WireGuardPort: a[AnnotationWireGuardPort],
		BGPAS:  a[AnnotationBGPAS],
		Blocks: slices.Clone(podCIDRs(n)), Updated: n.CreationTimestamp.Time,
	}
	for _, addr := range n.Status.Addresses {
		if addr.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(addr.Address)
		if err != nil {
			continue // the validator would refuse it anyway; the annotation may still serve
		}
		if ip.Is4() && r.HostIPv4 == "" {
			r.HostIPv4 = addr.Address
		} else if !ip.Is4() && r.HostIPv6 == "" {
			r.HostIPv6 = addr.Address
		}
	}
	return r
}

// cachedNode is what the informer caches of a Node (Transform's result):
// the metadata the cache itself needs (name, uid, resourceVersion,
// creation and deletion time), the Node's record, its routelet.io/
// annotations (the published ones, and the operator's bgp-peers) and
// whether its NetworkUnavailable condition is routelet's False. A few hundred bytes, where a *corev1.Node with its maps and
// slices takes several times that even with everything else dropped.
type cachedNode struct {
	metav1.ObjectMeta
	record peers.Record
	// annotation[i] is the value of Annotations[i], present when bit i of
	// annotated is set.
	annotation       [9]string
	annotated        uint16 // room for len(annotation) bits
	bgpPeers         string // AnnotationBGPPeers, "" absent
	networkAvailable bool
}

var _ runtime.Object = (*cachedNode)(nil)

// GetObjectKind implements runtime.Object: a cached Node has no type
// metadata of its own.
func (*cachedNode) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (n *cachedNode) DeepCopyObject() runtime.Object {
	out := *n
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.record.Blocks = slices.Clone(n.record.Blocks)
	return &out
}

// annotations returns the Node's routelet.io/ annotations as a map.
func (n *cachedNode) annotations() map[string]string {
	m := map[string]string{}
	for i, k := range Annotations {
		if n.annotated&(1<<i) != 0 {
			m[k] = n.annotation[i]
		}
	}
	return m
}

// cached returns the cached Node name.
func (d *Datastore) cached(name string) (*cachedNode, error) {
	obj, ok, err := d.informer.GetIndexer().GetByKey(name)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n, isNode := obj.(*cachedNode)
	if !ok || !isNode {
		return nil, fmt.Errorf("node %s not found", name)
	}
	return n, nil
}

// Transform is the informer's cache.TransformFunc: it keeps of a Node only
// what routelet reads (a cachedNode), so the cache stays small on large
// clusters (no managedFields, labels, images, other conditions, ...).
// Anything else (an object already transformed) passes through.
func Transform(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &cachedNode{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
		record: Record(n), bgpPeers: n.Annotations[AnnotationBGPPeers], networkAvailable: NetworkAvailable(n),
	}
	for i, k := range Annotations {
		if v, ok := n.Annotations[k]; ok {
			out.annotation[i] = v
			out.annotated |= 1 << i
		}
	}
	return out, nil
}

// nodeOf returns the cached Node in an informer event (also a
// tombstone's).
func nodeOf(obj any) (*cachedNode, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	n, ok := obj.(*cachedNode)
	return n, ok
}

// apiError counts a failed API call of operation op.
func (d *Datastore) apiError(op string) {
	d.apiErrors.WithLabelValues(op).Inc()
	d.mu.Lock()
	d.errCounts[op]++
	d.mu.Unlock()
}

// Health implements datastore.Datastore: the failed API calls per
// operation (the Kubernetes datastore keeps no liveness and does not
// tell reachability).
func (d *Datastore) Health() datastore.Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	return datastore.Health{RequestErrors: maps.Clone(d.errCounts)}
}

// Describe implements prometheus.Collector: the datastore's metrics.
func (d *Datastore) Describe(ch chan<- *prometheus.Desc) {
	d.apiErrors.Describe(ch)
	d.patches.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Datastore) Collect(ch chan<- prometheus.Metric) {
	d.apiErrors.Collect(ch)
	d.patches.Collect(ch)
}
