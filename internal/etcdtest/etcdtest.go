// Package etcdtest runs the cached etcd test binary (internal/testbins)
// for tests: on the host's loopback or inside a network namespace, with
// plain http or TLS with client certificates, stopped and started again
// on the same data to simulate outages.
package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/testbins"
	"github.com/routelet/routelet/internal/testpki"
	"github.com/routelet/routelet/internal/testproc"
)

// Options say where and how etcd runs.
type Options struct {
	// NetNS, when set, runs etcd inside this network namespace (its
	// loopback up, as netnstest.NewT leaves it). Nil: the test's own.
	NetNS ns.NetNS
	// Addr is the client address etcd listens on (besides loopback
	// inside NetNS); default 127.0.0.1.
	Addr netip.Addr
	// TLS serves https and requires client certificates of the test CA.
	TLS bool
	// Log receives etcd's output; nil keeps it in memory and prints it
	// only when the test fails.
	Log io.Writer
}

// Server is a running (or stopped) etcd.
type Server struct {
	// Endpoints are the client URLs.
	Endpoints []string
	// CAFile verifies the server; CertFile and KeyFile are a client
	// certificate it accepts (TLS only).
	CAFile, CertFile, KeyFile string
	// WrongCertFile and WrongKeyFile are a client certificate of another
	// CA, which the server refuses (TLS only).
	WrongCertFile, WrongKeyFile string
	// Dir holds the certificates and etcd's data.
	Dir string

	opts Options
	bin  string
	args []string
	proc *testproc.Proc
}

// Binary returns the cached etcd's path, skipping t (failing it with
// ROUTELET_REQUIRE_TEST_BINS=1) when it is missing.
func Binary(t testing.TB) string {
	t.Helper()
	p := testbins.EtcdPath()
	testproc.RequireBinaries(t, p)
	return p
}

// Start runs a one-member etcd as opts says and waits until it serves.
// It is stopped in t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := Binary(t)
	if !opts.Addr.IsValid() {
		opts.Addr = netip.MustParseAddr("127.0.0.1")
	}
	if opts.Log == nil {
		buf := &netnstest.Buffer{}
		opts.Log = buf
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("etcd output:\n%s", buf.String())
			}
		})
	}
	s := &Server{Dir: t.TempDir(), opts: opts, bin: bin}
	client, peer := 2379, 2380
	if opts.NetNS == nil {
		var err error
		if client, err = testproc.FreePort(); err == nil {
			peer, err = testproc.FreePort()
		}
		if err != nil {
			t.Fatalf("pick etcd ports: %v", err)
		}
	}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
		if err := s.writeCerts(); err != nil {
			t.Fatal(err)
		}
	}
	hostPort := func(a netip.Addr, p int) string { return net.JoinHostPort(a.String(), fmt.Sprint(p)) }
	listen := scheme + "://" + hostPort(opts.Addr, client)
	if opts.NetNS != nil && !opts.Addr.IsLoopback() {
		listen += "," + scheme + "://" + hostPort(netip.MustParseAddr("127.0.0.1"), client)
	}
	s.Endpoints = []string{scheme + "://" + hostPort(opts.Addr, client)}
	peerURL := "http://" + hostPort(netip.MustParseAddr("127.0.0.1"), peer)
	s.args = []string{
		"--name", "routelet-test",
		"--data-dir", filepath.Join(s.Dir, "data"),
		"--listen-client-urls", listen, "--advertise-client-urls", s.Endpoints[0],
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "routelet-test=" + peerURL,
		"--log-level", "warn",
	}
	if opts.TLS {
		s.args = append(s.args, "--cert-file", filepath.Join(s.Dir, "server.crt"), "--key-file", filepath.Join(s.Dir, "server.key"),
			"--client-cert-auth", "--trusted-ca-file", s.CAFile)
	}
	t.Cleanup(func() { s.Stop(t) })
	s.Resume(t)
	return s
}

// writeCerts writes the CA, etcd's serving certificate, a client
// certificate and one of another CA into s.Dir.
func (s *Server) writeCerts() error {
	ca, err := testpki.NewCA("routelet-test-etcd-ca")
	if err != nil {
		return err
	}
	other, err := testpki.NewCA("routelet-test-other-ca")
	if err != nil {
		return err
	}
	ips := []net.IP{net.IP(s.opts.Addr.AsSlice()), net.ParseIP("127.0.0.1")}
	srv, srvKey, err := ca.Issue(testpki.Leaf{CommonName: "etcd", Server: true, IPs: ips, DNSNames: []string{"localhost"}})
	if err != nil {
		return err
	}
	cli, cliKey, err := ca.Issue(testpki.Leaf{CommonName: "routelet"})
	if err != nil {
		return err
	}
	bad, badKey, err := other.Issue(testpki.Leaf{CommonName: "routelet"})
	if err != nil {
		return err
	}
	if err := testpki.WriteFiles(s.Dir, map[string][]byte{
		"ca.crt": ca.PEM, "server.crt": srv, "server.key": srvKey,
		"client.crt": cli, "client.key": cliKey, "wrong.crt": bad, "wrong.key": badKey,
	}); err != nil {
		return err
	}
	s.CAFile, s.CertFile, s.KeyFile = filepath.Join(s.Dir, "ca.crt"), filepath.Join(s.Dir, "client.crt"), filepath.Join(s.Dir, "client.key")
	s.WrongCertFile, s.WrongKeyFile = filepath.Join(s.Dir, "wrong.crt"), filepath.Join(s.Dir, "wrong.key")
	return nil
}

// Stop stops etcd (SIGTERM, by PID); its data stays for Resume.
func (s *Server) Stop(t testing.TB) {
	if s.proc != nil {
		s.proc.Stop(t)
		s.proc = nil
	}
}

// Resume starts etcd (again) on its data and waits until it serves.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	p, err := testproc.Start(s.opts.NetNS, s.opts.Log, s.bin, s.args...)
	if err != nil {
		t.Fatal(err)
	}
	s.proc = p
	cli := s.Client(t)
	defer cli.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Get(ctx, "routelet-test-health")
		cancel()
		if err == nil {
			return
		}
		if done, perr := p.Exited(); done {
			t.Fatalf("etcd exited: %v (last request: %v)", perr, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %v not serving: %v", s.Endpoints, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TLSConfig is the client TLS configuration with the accepted client
// certificate; nil without TLS.
func (s *Server) TLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	if !s.opts.TLS {
		return nil
	}
	c, err := transport.TLSInfo{TrustedCAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile}.ClientConfig()
	if err != nil {
		t.Fatalf("client TLS: %v", err)
	}
	return c
}

// Client returns a client of the test (dialling from inside NetNS when
// etcd runs there); the caller closes it.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: s.Endpoints, DialTimeout: 5 * time.Second, TLS: s.TLSConfig(t), Logger: zap.NewNop()}
	if s.opts.NetNS != nil {
		dial := testproc.DialerIn(s.opts.NetNS)
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	return cli
}

// String names the server for messages.
func (s *Server) String() string { return fmt.Sprintf("etcd %v", s.Endpoints) }
