package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/cli"
)

// zeros is an endless stdin.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// maxRSS is the resident memory past which TestEndlessInputRefused kills
// the binary: reading 1 MiB takes a few MiB.
const maxRSS = 256 << 20

// TestEndlessInputRefused: a config file, a record to add or a stdin that
// never ends (/dev/zero, a pipe fed forever) is refused at its size limit
// with an error naming the file and the limit, at once: it is never read
// whole. The binary is killed once its RSS passes maxRSS or after 5 s,
// so a reader without a limit fails the test instead of the machine.
func TestEndlessInputRefused(t *testing.T) {
	stateDir := t.TempDir()
	base := []string{"--state-dir=" + stateDir, "--node-name=n1", "--pod-cidr=10.250.0.0/24"}
	for _, c := range []struct {
		name  string
		args  []string
		stdin bool // fed zeros forever
		code  int
		want  []string
	}{
		{"status --config /dev/zero", []string{"status", "--config=/dev/zero"}, false, cli.ExitConfig,
			[]string{"config file /dev/zero", "more than 1 MiB"}},
		// /proc/self/fd/0 rather than /dev/stdin, which a minimal /dev
		// (the stock-kernel VM's) lacks.
		{"status --config /proc/self/fd/0 (endless pipe)", []string{"status", "--config=/proc/self/fd/0"}, true, cli.ExitConfig,
			[]string{"config file /proc/self/fd/0", "more than 1 MiB"}},
		{"nodes add --from /dev/zero", append([]string{"nodes", "add", "--from", "/dev/zero"}, base...), false, cli.ExitFail,
			[]string{"/dev/zero", "more than 1 MiB"}},
		{"nodes add --from - (endless pipe)", append([]string{"nodes", "add", "--from", "-"}, base...), true, cli.ExitFail,
			[]string{"read stdin: more than 1 MiB"}},
		{"diagnose --config /dev/zero", []string{"diagnose", "--config=/dev/zero", "10.250.0.2", "10.250.0.3"}, false, cli.ExitConfig,
			[]string{"config file /dev/zero", "more than 1 MiB"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "routeletd"), c.args...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if c.stdin {
				cmd.Stdin = zeros{}
			}
			cmd.WaitDelay = time.Second
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			grew := watchRSS(cmd.Process, maxRSS, exited)
			err := cmd.Wait()
			took := time.Since(start)
			close(exited)
			if rss := <-grew; rss > 0 {
				t.Fatalf("routeletd %s grew to %d MiB of memory (killed): it reads without a limit", c.name, rss>>20)
			}
			if ctx.Err() != nil {
				t.Fatalf("routeletd %s still reading after %s (killed): stderr %q", c.name, took.Round(time.Millisecond), head(stderr.String()))
			}
			if code := exitCode(err); code != c.code {
				t.Errorf("routeletd %s: exit %d, want %d; stderr %q", c.name, code, c.code, head(stderr.String()))
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("routeletd %s: stderr %q lacks %q", c.name, head(stderr.String()), w)
				}
			}
			if stdout.Len() > 0 {
				t.Errorf("routeletd %s wrote to stdout: %q", c.name, head(stdout.String()))
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(stateDir, "nodes")); len(ents) > 0 {
		t.Errorf("a refused record was written: %v", ents)
	}
}

// watchRSS polls p's resident memory until exited is closed and kills p
// once it passes limit; the channel then yields the RSS seen (0 when it
// never passed).
func watchRSS(p *os.Process, limit int64, exited <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		statm := fmt.Sprintf("/proc/%d/statm", p.Pid)
		for {
			select {
			case <-exited:
				out <- 0
				return
			default:
			}
			b, err := os.ReadFile(statm)
			if err != nil {
				<-exited
				out <- 0 // gone
				return
			}
			var size, rss int64
			if _, err := fmt.Sscan(string(b), &size, &rss); err == nil && rss*int64(os.Getpagesize()) > limit {
				_ = p.Kill()
				out <- rss * int64(os.Getpagesize())
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return out
}

// head is the start of a long output (a runtime's "out of memory" and
// its goroutine dump), for messages.
func head(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
