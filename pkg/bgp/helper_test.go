package bgp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// helperEnv set to 1 makes the test binary a speaker process (helperMain)
// instead of running tests. The kernel tests run each speaker so, started
// inside its node's network namespace: the namespace is per thread, and
// GoBGP's goroutines open their sockets from whatever thread they run on,
// so only a whole process inside the namespace keeps them there (as
// routeletd is, on a node).
const helperEnv = "ROUTELET_BGP_SPEAKER_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// helperConfig is the JSON form of a Config.
type helperConfig struct {
	ASN             uint32
	RouterID        netip.Addr
	ListenPort      int
	GracefulRestart bool
	RestartTime     time.Duration
	ConnectRetry    time.Duration
	HoldTime        time.Duration
}

// helperCmd is one request to a speaker process, a line of JSON.
type helperCmd struct {
	Op       string // new, peers, announce, learned, status, stop, close
	Config   helperConfig
	Peers    []Peer
	Prefixes []netip.Prefix
	NextHop4 netip.Addr
	NextHop6 netip.Addr
}

// helperReply answers one helperCmd.
type helperReply struct {
	Err     string
	Routes  []Route
	Peers   []PeerStatus
	Changes int64  // OnChange calls so far
	Leak    string // after stop/close: the goroutines left, "" none
}

// helperMain serves helperCmds from in, one reply each to out, until in
// ends (the test process went away). GoBGP's log goes to stderr.
func helperMain(in io.Reader, out io.Writer) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var sp *Speaker
	var changes atomic.Int64
	base := runtime.NumGoroutine()
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var c helperCmd
		var r helperReply
		err := json.Unmarshal(sc.Bytes(), &c)
		if err == nil && sp == nil && c.Op != "new" {
			err = fmt.Errorf("%s before new", c.Op)
		}
		if err == nil {
			switch c.Op {
			case "new":
				base = runtime.NumGoroutine()
				sp, err = New(Config{
					ASN: c.Config.ASN, RouterID: c.Config.RouterID, ListenPort: c.Config.ListenPort,
					GracefulRestart: c.Config.GracefulRestart, RestartTime: c.Config.RestartTime,
					ConnectRetry: c.Config.ConnectRetry, HoldTime: c.Config.HoldTime,
					OnChange: func() { changes.Add(1) },
					Logger:   logger,
				})
			case "peers":
				err = sp.SetPeers(c.Peers)
			case "announce":
				err = sp.SetAnnounced(c.Prefixes, c.NextHop4, c.NextHop6)
			case "learned":
				r.Routes = sp.Learned()
			case "status":
				r.Peers = sp.Peers()
			case "stop", "close":
				if c.Op == "stop" {
					err = sp.Stop()
				} else {
					err = sp.Close()
				}
				r.Leak = goroutinesLeft(base)
			default:
				err = fmt.Errorf("unknown op %q", c.Op)
			}
		}
		if err != nil {
			r.Err = err.Error()
		}
		r.Changes = changes.Load()
		if err := enc.Encode(r); err != nil {
			return 1
		}
	}
	return 0
}

// goroutinesLeft waits up to 2 s for the goroutine count to fall to base
// and returns the stacks of all goroutines when it does not.
func goroutinesLeft(base int) string {
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			return fmt.Sprintf("%d goroutines, %d before New:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// speakerProc is a speaker process run by a test inside a namespace.
type speakerProc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *json.Decoder
	log  *netnstest.Buffer
	mu   sync.Mutex
	dead bool
}

// startSpeaker starts the test binary as a speaker process in n and makes
// its Speaker with cfg. The process is killed in t.Cleanup; its log is
// printed when t failed.
func startSpeaker(t testing.TB, n ns.NetNS, name string, cfg helperConfig) *speakerProc {
	t.Helper()
	p := &speakerProc{t: t, name: name, log: &netnstest.Buffer{}}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), helperEnv+"=1")
	p.cmd.Stderr = p.log
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.in, p.out = in, json.NewDecoder(out)
	// The child is forked from the thread locked inside n and so starts
	// there.
	if err := n.Do(func(ns.NetNS) error { return p.cmd.Start() }); err != nil {
		t.Fatalf("start speaker %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.kill()
		if log := p.log.String(); strings.Contains(log, "WARNING: DATA RACE") || strings.Contains(log, "panic:") {
			t.Errorf("speaker %s: data race or panic in its log", name)
		}
		if t.Failed() {
			t.Logf("speaker %s log:\n%s", name, tail(p.log.String(), 150))
		}
	})
	p.must(helperCmd{Op: "new", Config: cfg})
	return p
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}

// kill ends the process with SIGKILL, as a crash, and waits for it.
func (p *speakerProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return
	}
	p.dead = true
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// call sends c and returns the reply.
func (p *speakerProc) call(c helperCmd) (helperReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var r helperReply
	if p.dead {
		return r, fmt.Errorf("speaker %s: process ended", p.name)
	}
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return r, fmt.Errorf("speaker %s: %s: %w", p.name, c.Op, err)
	}
	if err := p.out.Decode(&r); err != nil {
		return r, fmt.Errorf("speaker %s: %s: no reply: %w", p.name, c.Op, err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("speaker %s: %s: %s", p.name, c.Op, r.Err)
	}
	return r, nil
}

// must is call failing t on an error.
func (p *speakerProc) must(c helperCmd) helperReply {
	p.t.Helper()
	r, err := p.call(c)
	if err != nil {
		p.t.Fatal(err)
	}
	return r
}

func (p *speakerProc) peers(ps ...Peer) { p.t.Helper(); p.must(helperCmd{Op: "peers", Peers: ps}) }

func (p *speakerProc) announce(nh4, nh6 string, prefixes ...string) {
	p.t.Helper()
	c := helperCmd{Op: "announce"}
	if nh4 != "" {
		c.NextHop4 = netip.MustParseAddr(nh4)
	}
	if nh6 != "" {
		c.NextHop6 = netip.MustParseAddr(nh6)
	}
	for _, s := range prefixes {
		c.Prefixes = append(c.Prefixes, netip.MustParsePrefix(s))
	}
	p.must(c)
}

func (p *speakerProc) learned() []Route { p.t.Helper(); return p.must(helperCmd{Op: "learned"}).Routes }

func (p *speakerProc) status() []PeerStatus {
	p.t.Helper()
	return p.must(helperCmd{Op: "status"}).Peers
}

// peer is the status of the session to addr.
func (p *speakerProc) peer(addr string) PeerStatus {
	p.t.Helper()
	for _, s := range p.status() {
		if s.Address.String() == addr {
			return s
		}
	}
	p.t.Fatalf("speaker %s has no peer %s", p.name, addr)
	return PeerStatus{}
}

// end calls stop or close and fails t when goroutines were left.
func (p *speakerProc) end(op string) {
	p.t.Helper()
	if r := p.must(helperCmd{Op: op}); r.Leak != "" {
		p.t.Errorf("speaker %s: goroutines left after %s: %s", p.name, op, r.Leak)
	}
}
