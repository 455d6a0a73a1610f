package k8stest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/testbins"
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
	apiserver     *proc // nil while stopped
	etcd          *proc
}

// StartAPIServer starts kube-apiserver (Start does; after StopAPIServer it
// brings the same cluster back, etcd having kept its data) and waits until
// it is ready.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	if c.apiserver != nil {
		t.Fatal("kube-apiserver is already running")
	}
	p, err := start(c.opts, c.apiserverBin, c.apiserverArgs...)
	if err != nil {
		t.Fatal(err)
	}
	c.apiserver = p
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := waitReady(ctx, c, p, c.etcd); err != nil {
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
	if !c.apiserver.exited() {
		_ = c.apiserver.cmd.Process.Kill()
		<-c.apiserver.done
	}
	c.apiserver = nil
}

// Binaries returns the paths of the cached kube-apiserver and etcd. When one
// is missing it skips t, or fails it when ROUTELET_REQUIRE_TEST_BINS=1 (set
// by a CI lane that builds them first).
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	apiserver, etcd = testbins.KubeAPIServerPath(), testbins.EtcdPath()
	for _, p := range []string{apiserver, etcd} {
		if _, err := os.Stat(p); err != nil {
			msg := fmt.Sprintf("test binary %s missing (%v): run `make test-bins` (go run ./hack/testbins) to build it from the Go module proxy", p, err)
			if os.Getenv("ROUTELET_REQUIRE_TEST_BINS") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return apiserver, etcd
}

// Start runs etcd and kube-apiserver as opts says, waits until the API
// server is ready (RBAC's bootstrap roles included) and returns the
// cluster. Both processes are stopped and Dir removed in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "runs etcd and kube-apiserver as processes the test owns")
	apiserverBin, etcdBin := Binaries(t)
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

	etcdClient, etcdPeer := 2379, 2380
	if opts.NetNS == nil {
		if etcdClient, err = freePort(); err == nil {
			etcdPeer, err = freePort()
		}
		if err != nil {
			t.Fatalf("pick etcd ports: %v", err)
		}
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	etcd, err := start(opts, etcdBin,
		"--name", "routelet-test",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "routelet-test="+peerURL,
		"--log-level", "warn",
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, etcd) })

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
			stop(t, c.apiserver)
		}
	})
	c.StartAPIServer(t)
	return c
}

// proc is one started process.
type proc struct {
	cmd  *exec.Cmd
	name string
	done chan struct{}
	err  error
}

// start runs bin with args, in opts.NetNS when set.
func start(opts Options, bin string, args ...string) (*proc, error) {
	name := filepath.Base(bin)
	cmd := exec.Command(bin, args...)
	if opts.NetNS != nil {
		// `ip netns exec` execs bin in place: the PID is bin's own.
		cmd = exec.Command("ip", append([]string{"netns", "exec", netnstest.Name(opts.NetNS), bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	// Killed with the test process, so a crashed run leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, name: name, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to p's PID, then SIGKILL after 30 s.
func stop(t testing.TB, p *proc) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s (pid %d) ignored SIGTERM for 30s; killing it", p.name, p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitReady polls /readyz until it answers 200 or a process exits.
func waitReady(ctx context.Context, c *Cluster, procs ...*proc) error {
	// c.Config dials from inside the namespace when there is one.
	tr, err := rest.TransportFor(c.Config)
	if err != nil {
		return fmt.Errorf("client transport: %w", err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	last := errors.New("no answer yet")
	for {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("%s exited: %v (last probe: %v)", p.name, p.err, last)
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
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := n.Do(func(ns.NetNS) error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
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
		if port, err = freePort(); err != nil {
			return nil, fmt.Errorf("pick kube-apiserver port: %w", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "routelet-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IP(opts.Addr.AsSlice()), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	adminKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate admin key: %w", err)
	}
	adminTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: AdminUser, Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	adminDER, err := x509.CreateCertificate(rand.Reader, adminTmpl, caCert, &adminKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create admin certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	caPEM, adminPEM := pemBlock("CERTIFICATE", caDER), pemBlock("CERTIFICATE", adminDER)
	files := map[string][]byte{
		"ca.crt":      caPEM,
		"serving.crt": pemBlock("CERTIFICATE", srvDER),
		"admin.crt":   adminPEM,
	}
	keys := map[string][]byte{}
	for name, key := range map[string]*ecdsa.PrivateKey{"serving.key": srvKey, "sa.key": saKey, "admin.key": adminKey} {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", name, err)
		}
		files[name] = pemBlock("PRIVATE KEY", der)
		keys[name] = files[name]
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	files["sa.pub"] = pemBlock("PUBLIC KEY", pub)
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
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

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// freePort returns a TCP port free on the host's loopback just now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portOf returns the port of an https://host:port URL.
func portOf(url string) int {
	_, p, _ := net.SplitHostPort(url[len("https://"):])
	n, _ := strconv.Atoi(p)
	return n
}
