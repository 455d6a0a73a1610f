package workloads

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/state"
)

// opens counts the IN_OPEN events of file name on the inotify instance fd
// (non-blocking, everything queued so far). The watch must also report
// closes: the kernel merges an event into an identical one queued last.
func opens(t *testing.T, fd int, name string) int {
	t.Helper()
	buf := make([]byte, 64*1024)
	n := 0
	for {
		got, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return n
		}
		if err != nil {
			t.Fatalf("read inotify: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= got; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if ev.Mask&unix.IN_OPEN != 0 && strings.TrimRight(string(raw), "\x00") == name {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestGetReadsTheRecordOnce: Get opens the record file once, so what it
// validates and what it returns are the same read.
func TestGetReadsTheRecordOnce(t *testing.T) {
	s, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &state.Workload{ContainerID: "c0ffee", IfName: "eth0", HostIface: "rl0", Netns: "/var/run/netns/c0ffee",
		IPs: []string{"10.244.1.2/32"}, Created: time.Now()}
	if err := s.PutWorkload(w); err != nil {
		t.Fatal(err)
	}
	key := state.AttachmentName(w.ContainerID, w.IfName) + ".json"
	if _, err := os.Stat(filepath.Join(s.WorkloadsDir(), key)); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, s.WorkloadsDir(), unix.IN_OPEN|unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	got, err := New(s, nil).Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if got.ContainerID != w.ContainerID || got.HostIface != w.HostIface {
		t.Fatalf("Get(%s) = %+v, want the record written", key, got)
	}
	if n := opens(t, fd, key); n != 1 {
		t.Fatalf("Get(%s) opened the record %d times, want 1", key, n)
	}
	if _, err := New(s, nil).Get("other.json"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get(other.json) = %v, want state.ErrNotFound", err)
	}
	if _, err := New(s, nil).Get("../x.json"); err == nil || !strings.Contains(err.Error(), "../x.json") {
		t.Fatalf("Get(../x.json) = %v, want an error naming it", err)
	}
}

// TestRepair: a record file holding no JSON at all is written back from
// the last good read; one of another version, one that is gone or readable
// again is left alone, and a last read that belongs under another name is
// refused, naming both.
func TestRepair(t *testing.T) {
	s, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := New(s, nil)
	w := &state.Workload{ContainerID: "c0ffee", IfName: "eth0", HostIface: "rl0", Netns: "/var/run/netns/c0ffee",
		IPs: []string{"10.244.1.2/32"}, Created: time.Now()}
	if err := s.PutWorkload(w); err != nil {
		t.Fatal(err)
	}
	key := state.AttachmentName(w.ContainerID, w.IfName) + ".json"
	path := filepath.Join(s.WorkloadsDir(), key)
	if fixed, err := d.Repair(key, w); fixed || err != nil {
		t.Errorf("Repair of a good record: %v, %v; want nothing done", fixed, err)
	}
	for _, junk := range []string{"", "{\"version\":1,\"containerID\":\"c0", "\x00\x00garbage"} {
		if err := os.WriteFile(path, []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		if fixed, err := d.Repair(key, w); !fixed || err != nil {
			t.Errorf("Repair of %q: %v, %v; want it written back", junk, fixed, err)
		}
		if got, err := d.Get(key); err != nil || got.HostIface != "rl0" || got.IPs[0] != "10.244.1.2/32" {
			t.Errorf("after the repair of %q: %+v, %v", junk, got, err)
		}
	}
	future := `{"version":9,"containerID":"c0ffee","ifName":"eth0"}`
	if err := os.WriteFile(path, []byte(future), 0o600); err != nil {
		t.Fatal(err)
	}
	if fixed, err := d.Repair(key, w); fixed || err != nil {
		t.Errorf("Repair of another version's record: %v, %v; want it left alone", fixed, err)
	}
	if data, _ := os.ReadFile(path); string(data) != future {
		t.Errorf("another version's record rewritten: %s", data)
	}
	os.Remove(path)
	if fixed, err := d.Repair(key, w); fixed || err != nil {
		t.Errorf("Repair of a removed record: %v, %v; want nothing written", fixed, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a removed record came back: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	other := *w
	other.ContainerID = "beef"
	if fixed, err := d.Repair(key, &other); fixed || err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "beef_eth0.json") {
		t.Errorf("Repair with another attachment's record: %v, %v; want an error naming both files", fixed, err)
	}
}
