package netnsclaim

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPrivileged(t *testing.T) {
	for _, c := range []struct {
		what string
		h    Holder
		want bool
	}{
		{"owned by root", Holder{UID: 0}, true},
		{"owned by root, held by an unprivileged process", Holder{UID: 0, Procs: []Proc{{PID: 7, EUID: 65534}}}, true},
		{"owned by nobody", Holder{UID: 65534}, false},
		{"owned by nobody, passed to a root process", Holder{UID: 65534, Procs: []Proc{{PID: 7, EUID: 0}}}, false},
		{"no owner known, no holder seen", Holder{UID: -1}, true},
		{"no owner known, a root holder", Holder{UID: -1, Procs: []Proc{{PID: 7, EUID: 65534}, {PID: 8, EUID: 0}}}, true},
		{"no owner known, an unreadable holder", Holder{UID: -1, Procs: []Proc{{PID: 7, EUID: -1}}}, true},
		{"no owner known, unprivileged holders", Holder{UID: -1, Procs: []Proc{{PID: 7, EUID: 65534}}}, false},
	} {
		if got := c.h.Privileged(); got != c.want {
			t.Errorf("%s: Privileged() = %v, want %v", c.what, got, c.want)
		}
	}
}

func TestHolderString(t *testing.T) {
	h := Holder{Name: "@routeletd", UID: 65534, Procs: []Proc{{PID: 42, EUID: 65534, Exe: "/tmp/x\x1b[2J"}}}
	got := h.String()
	for _, want := range []string{"@routeletd", "uid 65534", "pid 42", `"/tmp/x\x1b[2J"`} {
		if !strings.Contains(got, want) {
			t.Errorf("String() = %q, want it to hold %q", got, want)
		}
	}
	if got := (Holder{Name: "@routeletd", UID: -1}).String(); !strings.Contains(got, "no process this PID namespace sees") {
		t.Errorf("String() of an unseen holder = %q", got)
	}
}

func TestParseProcNetUnix(t *testing.T) {
	in := `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 12345 @routeletd
0000000000000000: 00000002 00000000 00010000 0001 01 12346 @routeletd/17-abcd
0000000000000000: 00000002 00000000 00010000 0001 01 12347 /run/routelet/routeletd.sock
0000000000000000: 00000002 00000000 00000000 0002 01 12348
0000000000000000: 00000002 00000000 00010000 0001 01 12349 @other
`
	got, err := parseProcNetUnix(strings.NewReader(in), func(n string) bool { return strings.HasPrefix(n, "routeletd") })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (socket{name: "routeletd", inode: 12345, uid: -1}) || got[1] != (socket{name: "routeletd/17-abcd", inode: 12346, uid: -1}) {
		t.Errorf("parsed %+v", got)
	}
}

func TestParseUnixDiag(t *testing.T) {
	ne := binary.NativeEndian
	msg := make([]byte, sizeofUnixDiagMsg)
	ne.PutUint32(msg[4:], 777)
	attr := func(typ uint16, v []byte) []byte {
		a := make([]byte, 4, 4+len(v)+3)
		ne.PutUint16(a, uint16(4+len(v)))
		ne.PutUint16(a[2:], typ)
		a = append(a, v...)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		return a
	}
	uid := make([]byte, 4)
	ne.PutUint32(uid, 65534)
	b := append(append(msg, attr(unixDiagNameAtt, []byte("\x00routeletd"))...), attr(unixDiagUIDAtt, uid)...)
	s, hasUID, ok := parseUnixDiag(b)
	if !ok || !hasUID || s != (socket{name: "routeletd", inode: 777, uid: 65534}) {
		t.Errorf("parsed %+v, uid %v, ok %v", s, hasUID, ok)
	}
	// A path socket has no abstract name; a truncated attribute stops the parse.
	s, _, ok = parseUnixDiag(append(append([]byte{}, msg...), attr(unixDiagNameAtt, []byte("/run/x"))...))
	if !ok || s.name != "" {
		t.Errorf("path socket parsed as %+v", s)
	}
	if _, _, ok := parseUnixDiag(msg[:8]); ok {
		t.Error("a short message parsed")
	}
	bad := append(append([]byte{}, msg...), 0xff, 0x00, 0x00, 0x00)
	if s, _, ok := parseUnixDiag(bad); !ok || s.name != "" {
		t.Errorf("bad attribute parsed as %+v", s)
	}
}

// TestProcHolders: the processes whose descriptors name the socket's
// inode, with their effective uid and executable.
func TestProcHolders(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, status, exe string, fds map[string]string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(exe, filepath.Join(proc, pid, "exe")); err != nil {
			t.Fatal(err)
		}
		for fd, target := range fds {
			if err := os.Symlink(target, filepath.Join(proc, pid, "fd", fd)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("17", "Name:\tsquat\nUid:\t1000\t65534\t65534\t65534\n", "/usr/bin/squat", map[string]string{"0": "/dev/null", "3": "socket:[777]"})
	mk("18", "Name:\tother\nUid:\t0\t0\t0\t0\n", "/usr/bin/other", map[string]string{"3": "socket:[7770]"})
	mk("19", "Name:\tbroken\n", "/usr/bin/broken", map[string]string{"4": "socket:[777]"})
	got := procHolders(proc, 777)
	want := []Proc{{PID: 17, EUID: 65534, Exe: "/usr/bin/squat"}, {PID: 19, EUID: -1, Exe: "/usr/bin/broken"}}
	if !slices.Equal(got, want) {
		t.Errorf("procHolders = %+v, want %+v", got, want)
	}
}
