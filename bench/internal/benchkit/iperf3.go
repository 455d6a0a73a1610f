package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
)

// Iperf3 is one iperf3 TCP transfer between two network namespaces: a
// one-off server (-s -1) in Server, the client (-J) in Client.
type Iperf3 struct {
	Client, Server string // network namespace names
	Dst            string // the address the client connects to
	Secs           int    // the transfer's length (-t)
	// Wrap, when set, is put in front of each iperf3 command line (e.g.
	// taskset -c N); it must exec iperf3 in place, so the rusage stays
	// iperf3's.
	Wrap func(argv []string) []string
	// Around, when set, is called right before each client run and the
	// function it returns right after it: the caller's CPU readings over
	// the transfer. A retried run calls it again, so what it keeps is the
	// last run's, the one Run reports.
	Around func() (after func() error, err error)
}

// Iperf3Result is what the transfer received and what its two processes
// spent, in seconds of CPU (user + system).
type Iperf3Result struct {
	Bytes, BitsPerSecond float64 // received, per iperf3's sum_received
	ClientCPU, ServerCPU float64
}

// Run runs the transfer. The server needs a moment to listen: a refused
// connection is retried (iperf3 -J reports errors in its JSON and may
// still exit 0), up to 50 times.
func (p Iperf3) Run(ctx context.Context) (Iperf3Result, error) {
	const port = "5201"
	wrap := func(args ...string) []string {
		if p.Wrap == nil {
			return args
		}
		return p.Wrap(args)
	}
	// ip netns exec execs its command in place: the processes' rusage is
	// iperf3's.
	server := exec.Command("ip", append([]string{"netns", "exec", p.Server}, wrap("iperf3", "-s", "-1", "-p", port)...)...)
	server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	serverOut := &netnstest.Buffer{}
	server.Stdout, server.Stderr = serverOut, serverOut
	if err := netnstest.StartPinned(server); err != nil {
		return Iperf3Result{}, err
	}
	serverDone := make(chan struct{})
	go func() { server.Wait(); close(serverDone) }()
	defer func() { server.Process.Kill(); <-serverDone }()
	var res struct {
		End struct {
			SumReceived struct {
				Bytes         float64 `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	var out Iperf3Result
	for try := 0; ; try++ {
		after := func() error { return nil }
		if p.Around != nil {
			var err error
			if after, err = p.Around(); err != nil {
				return Iperf3Result{}, err
			}
		}
		c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.Client}, wrap("iperf3", "-c", p.Dst, "-p", port, "-t", strconv.Itoa(p.Secs), "-J")...)...)
		stdout, err := c.Output()
		if aerr := after(); aerr != nil {
			return Iperf3Result{}, aerr
		}
		if c.ProcessState != nil {
			out.ClientCPU = (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		}
		res.Error = ""
		if jerr := json.Unmarshal(stdout, &res); jerr != nil {
			return Iperf3Result{}, errors.Join(err, fmt.Errorf("iperf3 output: %w", jerr))
		}
		if err == nil && res.Error == "" {
			break
		}
		if try == 50 || ctx.Err() != nil || !strings.Contains(res.Error, "unable to connect") {
			return Iperf3Result{}, fmt.Errorf("iperf3 -c %s: %v %s (server: %s)", p.Dst, err, res.Error, strings.TrimSpace(serverOut.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res.End.SumReceived.Bytes <= 0 {
		return Iperf3Result{}, fmt.Errorf("iperf3 -c %s: nothing received", p.Dst)
	}
	// The one-off server exits once the client is done; its rusage is
	// complete then.
	select {
	case <-serverDone:
	case <-time.After(10 * time.Second):
		return Iperf3Result{}, fmt.Errorf("iperf3 server for %s did not exit after the transfer: %s", p.Dst, strings.TrimSpace(serverOut.String()))
	}
	out.ServerCPU = (server.ProcessState.UserTime() + server.ProcessState.SystemTime()).Seconds()
	out.Bytes, out.BitsPerSecond = res.End.SumReceived.Bytes, res.End.SumReceived.BitsPerSecond
	return out, nil
}
