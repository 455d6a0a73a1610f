package netnstest

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WatchDir starts an inotify watch on dir (every event kind; closed at
// t's cleanup) and returns a function that returns the events that
// arrived since its last call: the union of the masks (unix.IN_*) by the
// name they named, "" for dir itself. It needs no privileges.
func WatchDir(t testing.TB, dir string) func() map[string]uint32 {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_ALL_EVENTS); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	buf := make([]byte, 64<<10)
	return func() map[string]uint32 {
		seen := map[string]uint32{}
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) || n <= 0 {
				return seen
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				start := off + unix.SizeofInotifyEvent
				name := strings.TrimRight(string(buf[start:start+int(ev.Len)]), "\x00")
				seen[name] |= ev.Mask
				off = start + int(ev.Len)
			}
		}
	}
}
