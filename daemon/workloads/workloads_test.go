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
