package ipam

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The helper process is this test binary re-executed with helperEnv set; it
// does one job on an IPAM directory and reports on stdout.
const helperEnv = "ROUTELET_IPAM_HELPER"

// crashExit is the exit code of a helper that "crashed" at a chosen step.
const crashExit = 3

// TestHelperProcess is not a test: it is the body of the helper process.
//
//	alloc <prefix> <n>            allocate n attachments <prefix>-<i>, print each address
//	crash-alloc <id> <step> <k>   Allocate id, exit(3) at the k-th time step is reached
//	crash-release <id> <step> <k> Release id, exit(3) likewise
//	hold <id>                     take the lock, print "locked", hold until stdin closes
func TestHelperProcess(t *testing.T) {
	args := strings.Fields(os.Getenv(helperEnv))
	if len(args) == 0 {
		t.Skip("helper process for the multi-process tests; runs only when re-executed")
	}
	var blocks []netip.Prefix
	for _, b := range strings.Fields(os.Getenv("ROUTELET_IPAM_BLOCKS")) {
		blocks = append(blocks, netip.MustParsePrefix(b))
	}
	a, err := New(os.Getenv("ROUTELET_IPAM_DIR"), blocks, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch args[0] {
	case "alloc":
		n, _ := strconv.Atoi(args[2])
		for i := 0; i < n; i++ {
			got, err := a.Allocate(ctx, att(fmt.Sprintf("%s-%d", args[1], i)), nil)
			if err != nil {
				fail(err)
			}
			fmt.Println(got[0].Addr)
		}
	case "crash-alloc", "crash-release":
		k, _ := strconv.Atoi(args[3])
		seen := 0
		a.testHook = func(step string) {
			if step == args[2] {
				if seen++; seen == k {
					os.Exit(crashExit)
				}
			}
		}
		if args[0] == "crash-alloc" {
			_, err = a.Allocate(ctx, att(args[1]), nil)
		} else {
			err = a.Release(ctx, att(args[1]))
		}
		if err != nil {
			fail(err)
		}
	case "hold":
		id := att(args[1])
		l, err := a.lock(ctx, "allocate", &id)
		if err != nil {
			fail(err)
		}
		fmt.Println("locked")
		_, _ = io.Copy(io.Discard, os.Stdin)
		l.unlock()
	}
	os.Exit(0)
}

func helperCmd(t *testing.T, dir, blocks string, job ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(job, " "), "ROUTELET_IPAM_DIR="+dir, "ROUTELET_IPAM_BLOCKS="+blocks)
	return cmd
}

func TestConcurrentProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ipam")
	const procs, each = 4, 15 // 60 of the 62 usable addresses of a /26
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := 0; p < procs; p++ {
		cmd := helperCmd(t, dir, "10.0.0.0/26", "alloc", fmt.Sprintf("p%d", p), strconv.Itoa(each))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	results := make(chan netip.Addr, procs*each)
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", p, err, outs[p])
		}
		for _, line := range strings.Fields(outs[p].String()) {
			results <- netip.MustParseAddr(line)
		}
	}
	close(results)
	checkDistinct(t, results, procs*each)
	a := newAt(t, dir, "10.0.0.0/26")
	all, err := a.List(context.Background())
	if err != nil || len(all) != procs*each {
		t.Fatalf("List has %d attachments (err %v), want %d", len(all), err, procs*each)
	}
	checkOwnership(t, a)
}

func TestLockTimeoutAcrossProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ipam")
	cmd := helperCmd(t, dir, "10.0.0.0/29", "hold", "sleepy")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("helper did not take the lock: %q, %v", line, err)
	}
	_, lte, _ := allocateLockedOut(t, dir, 100*time.Millisecond)
	if want := fmt.Sprintf("pid %d (allocate sleepy/eth0)", cmd.Process.Pid); !strings.HasPrefix(lte.Holder, want) {
		t.Fatalf("Holder = %q, want it to start with %q", lte.Holder, want)
	}
	// Once the holder exits, the lock is free again.
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if _, err := newAt(t, dir, "10.0.0.0/29").Allocate(context.Background(), att("waiter"), nil); err != nil {
		t.Fatalf("Allocate after the holder exited: %v", err)
	}
}

// TestCrashBetweenSteps kills a helper process after each step of Allocate
// and of Release (dual-stack, so "after the first claim" leaves one family
// claimed and the other not) and checks that a fresh Allocator never hands
// out an address twice, that retrying the interrupted call converges, and
// that nothing leaks: once everything is released the whole block is
// allocatable again.
func TestCrashBetweenSteps(t *testing.T) {
	const blocks = "10.0.0.0/29 fd00::/125"
	for _, tc := range []struct {
		op, step string
		k        int
		owned    int // addresses the victim owns after the crash
	}{
		{"alloc", "intent", 1, 0},
		{"alloc", "claim", 1, 1},
		{"alloc", "hint", 1, 1},
		{"alloc", "claim", 2, 2},
		{"alloc", "hint", 2, 2},
		{"release", "unhint", 1, 2},
		{"release", "unclaim", 1, 1},
		{"release", "unhint", 2, 1},
		{"release", "unclaim", 2, 0},
	} {
		t.Run(fmt.Sprintf("%s-%s-%d", tc.op, tc.step, tc.k), func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "ipam")
			a := newAt(t, dir, strings.Fields(blocks)...)
			mustAllocate(t, a, att("bystander"))
			var before []Allocation
			if tc.op == "release" {
				before = mustAllocate(t, a, att("victim"))
			}
			cmd := helperCmd(t, dir, blocks, "crash-"+tc.op, "victim", tc.step, strconv.Itoa(tc.k))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != crashExit {
				t.Fatalf("helper did not crash at %s #%d: %v\n%s", tc.step, tc.k, err, out)
			}
			checkOwnership(t, a)

			// Whatever the victim owns now, nobody else may get.
			owned, err := a.Get(ctx, att("victim"))
			if err != nil {
				t.Fatalf("Get after crash: %v", err)
			}
			if len(owned) != tc.owned {
				t.Fatalf("after the crash the victim owns %v, want %d addresses (held before: %v)", owned, tc.owned, before)
			}
			others := map[netip.Addr]bool{}
			for i := 0; ; i++ {
				got, err := a.Allocate(ctx, att(fmt.Sprintf("other%d", i)), nil)
				if errors.Is(err, ErrExhausted) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, al := range got {
					others[al.Addr] = true
				}
			}
			for _, al := range owned {
				if others[al.Addr] {
					t.Fatalf("%s is owned by the crashed victim and was handed to another attachment", al.Addr)
				}
			}
			// Make room, then retry the interrupted operation.
			if err := a.Release(ctx, att("other0")); err != nil {
				t.Fatal(err)
			}
			if tc.op == "alloc" {
				got := mustAllocate(t, a, att("victim"))
				if len(got) != 2 {
					t.Fatalf("retried Allocate = %v, want one IPv4 and one IPv6", got)
				}
				for _, al := range owned {
					if !containsAddr(got, al.Addr) {
						t.Fatalf("retried Allocate = %v, dropped %s it already owned", got, al.Addr)
					}
				}
			}
			if err := a.Release(ctx, att("victim")); err != nil {
				t.Fatalf("retried Release: %v", err)
			}
			checkOwnership(t, a)

			// No leak: release everyone, then the whole block is allocatable.
			all, err := a.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for at := range all {
				if err := a.Release(ctx, at); err != nil {
					t.Fatal(err)
				}
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, addrsSubdir)); countVisible(entries) != 0 {
				t.Fatalf("claims left after releasing everything: %v", entries)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, attachmentsSubdir)); countVisible(entries) != 0 {
				t.Fatalf("records left after releasing everything: %v", entries)
			}
			n := 0
			for ; ; n++ {
				if _, err := a.Allocate(ctx, att(fmt.Sprintf("fill%d", n)), nil); err != nil {
					if !errors.Is(err, ErrExhausted) {
						t.Fatal(err)
					}
					break
				}
			}
			if n != 6 {
				t.Fatalf("after releasing everything %d attachments fit, want 6 (the /29's usable addresses)", n)
			}
		})
	}
}

func containsAddr(allocs []Allocation, a netip.Addr) bool {
	for _, al := range allocs {
		if al.Addr == a {
			return true
		}
	}
	return false
}

// countVisible counts directory entries that are not dotfiles (temp files
// left by a killed writer are dotfiles and never count as state).
func countVisible(entries []os.DirEntry) int {
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}
