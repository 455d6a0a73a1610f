package k8stest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/testbins"
	"github.com/routelet/routelet/internal/testpki"
	"github.com/routelet/routelet/internal/testproc"
)

// AdminUser is the user of Cluster.Config's client certificate; it is in
// the system:masters group, which RBAC lets do everything.
const AdminUser = "routelet-test-admin"

// Options says where the cluster runs.
type Options struct {
	// NetNS, when set, runs etcd and kube-apiserver inside this network
	// namespace (its loopback must be up, as netnstest.NewT leaves it).
	// Nil runs them in the test's own namespace.
	NetNS ns.NetNS
	// Addr is the address kube-apiserver serves on; default 127.0.0.1. To
	// reach it from other namespaces, give an address of NetNS's uplink.
	Addr netip.Addr
	// Port is kube-apiserver's secure port; 0 picks a free one on the
	// host's loopback and 6443 inside NetNS. etcd listens on loopback only.
	Port int
	// Log receives both processes' output; nil keeps it in memory and
	// prints it only when the test fails.
	Log io.Writer
}

// Cluster is a running etcd + kube-apiserver.
type Cluster struct {
	// Config authenticates as AdminUser.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config.
	Kubeconfig string
	// URL is kube-apiserver's https URL; CA verifies its certificate.
	URL string
	CA  []byte
	// Dir holds the certificates, keys, kubeconfig and etcd's data.
	Dir string

	opts          Options
	apiserverBin  string
	apiserverArgs []string
	apiserver     *testproc.Proc // nil while stopped
	etcd          *etcdtest.Server
}

// StartAPIServer starts kube-apiserver (Start does; after StopAPIServer it
// brings the same cluster back, etcd having kept its data) and waits until
// it is ready.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	if c.apiserver != nil {
		t.Fatal("kube-apiserver is already running")
	}
	p, err := testproc.Start(c.opts.NetNS, c.opts.Log, c.apiserverBin, c.apiserverArgs...)
	if err != nil {
		t.Fatal(err)
	}
	c.apiserver = p
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := waitReady(ctx, c, p); err != nil {
		t.Fatalf("kube-apiserver at %s not ready: %v", c.URL, err)
	}
}

// StopAPIServer kills kube-apiserver (SIGKILL to its PID: a crash, and no
// wait for its graceful shutdown, which open watches hold up) and waits
// until it has exited; etcd keeps running. Clients see an API outage until
// StartAPIServer.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	if c.apiserver == nil {
		t.Fatal("kube-apiserver is not running")
	}
	c.apiserver.Kill()
	c.apiserver = nil
}

// Binaries returns the paths of the cached kube-apiserver and etcd. When one
// is missing it skips t, or fails it when ROUTELET_REQUIRE_TEST_BINS=1 (set
// by a CI lane that builds them first).
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	apiserver, etcd = testbins.KubeAPIServerPath(), testbins.EtcdPath()
	testproc.RequireBinaries(t, apiserver, etcd)
	return apiserver, etcd
}

// Start runs etcd and kube-apiserver as opts says, waits until the API
// server is ready (RBAC's bootstrap roles included) and returns the
// cluster. Both processes are stopped and Dir removed in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "runs etcd and kube-apiserver as processes the test owns")
	apiserverBin, _ := Binaries(t)
	if !opts.Addr.IsValid() {
		opts.Addr = netip.MustParseAddr("127.0.0.1")
	}
	var logBuf *netnstest.Buffer
	if opts.Log == nil {
		logBuf = &netnstest.Buffer{}
		opts.Log = logBuf
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("etcd and kube-apiserver output:\n%s", logBuf.String())
			}
		})
	}
	dir := t.TempDir()
	c, err := prepare(dir, opts)
	if err != nil {
		t.Fatalf("prepare the API server's files: %v", err)
	}

	// etcd on loopback (inside NetNS when set), plain http.
	etcd := etcdtest.Start(t, etcdtest.Options{NetNS: opts.NetNS, Log: opts.Log})
	clientURL := etcd.Endpoints[0]

	c.opts, c.apiserverBin, c.etcd = opts, apiserverBin, etcd
	c.apiserverArgs = []string{
		"--etcd-servers", clientURL,
		"--bind-address", opts.Addr.String(),
		"--advertise-address", opts.Addr.String(),
		// The kubernetes Service's endpoint would be the (loopback)
		// address, which the reconciler refuses; no test needs it.
		"--endpoint-reconciler-type", "none",
		"--secure-port", strconv.Itoa(portOf(c.URL)),
		"--tls-cert-file", filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file", filepath.Join(dir, "serving.key"),
		"--client-ca-file", filepath.Join(dir, "ca.crt"),
		"--authorization-mode", "RBAC",
		// As kubeadm and most distributions set it: node agents run
		// privileged.
		"--allow-privileged=true",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--v", "0",
	}
	t.Cleanup(func() {
		if c.apiserver != nil {
			c.apiserver.Stop(t)
		}
	})
	c.StartAPIServer(t)
	return c
}

// waitReady polls /readyz until it answers 200 or a process exits.
func waitReady(ctx context.Context, c *Cluster, procs ...*testproc.Proc) error {
	// c.Config dials from inside the namespace when there is one.
	tr, err := rest.TransportFor(c.Config)
	if err != nil {
		return fmt.Errorf("client transport: %w", err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	last := errors.New("no answer yet")
	for {
		for _, p := range procs {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited: %v (last probe: %v)", p.Name, err, last)
			}
		}
		resp, err := client.Get(c.URL + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("/readyz %d: %s", resp.StatusCode, body)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last probe: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DialerIn returns a DialContext that opens its TCP connections from inside
// the network namespace n (for clients in the test process talking to an
// API server that listens only there).
func DialerIn(n ns.NetNS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return testproc.DialerIn(n)
}

// prepare writes the CA, the serving and admin certificates, the
// service-account key pair and the admin kubeconfig into dir, and returns
// the cluster description.
func prepare(dir string, opts Options) (*Cluster, error) {
	port := opts.Port
	if port == 0 && opts.NetNS != nil {
		port = 6443
	}
	if port == 0 {
		var err error
		if port, err = testproc.FreePort(); err != nil {
			return nil, fmt.Errorf("pick kube-apiserver port: %w", err)
		}
	}
	ca, err := testpki.NewCA("routelet-test-ca")
	if err != nil {
		return nil, err
	}
	srvCert, srvKey, err := ca.Issue(testpki.Leaf{
		CommonName: "kube-apiserver", Server: true,
		IPs:      []net.IP{net.IP(opts.Addr.AsSlice()), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	adminPEM, adminKey, err := ca.Issue(testpki.Leaf{CommonName: AdminUser, Organization: []string{"system:masters"}})
	if err != nil {
		return nil, err
	}
	saKey, err := testpki.NewKey()
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := testpki.KeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	caPEM := ca.PEM
	keys := map[string][]byte{"admin.key": adminKey}
	if err := testpki.WriteFiles(dir, map[string][]byte{
		"ca.crt": caPEM, "serving.crt": srvCert, "serving.key": srvKey, "admin.crt": adminPEM, "admin.key": adminKey,
		"sa.key": saKeyPEM, "sa.pub": testpki.PEM("PUBLIC KEY", pub),
	}); err != nil {
		return nil, err
	}

	url := "https://" + net.JoinHostPort(opts.Addr.String(), strconv.Itoa(port))
	cfg := &rest.Config{
		Host:            url,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: adminPEM, KeyData: keys["admin.key"]},
		QPS:             100,
		Burst:           200,
	}
	if opts.NetNS != nil {
		cfg.Dial = DialerIn(opts.NetNS)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: adminPEM, ClientKeyData: keys["admin.key"]}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return &Cluster{Config: cfg, Kubeconfig: kubeconfig, URL: url, CA: caPEM, Dir: dir}, nil
}

// TokenConfig returns a copy of c.Config that authenticates with token
// instead of the admin certificate, e.g. a service account's from the
// TokenRequest API.
func (c *Cluster) TokenConfig(token string) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.CertData, cfg.KeyData = nil, nil
	cfg.BearerToken = token
	return cfg
}

// portOf returns the port of an https://host:port URL.
func portOf(url string) int {
	_, p, _ := net.SplitHostPort(url[len("https://"):])
	n, _ := strconv.Atoi(p)
	return n
}
