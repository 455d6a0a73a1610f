package netnsclaim

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// socket is a bound abstract unix socket of the calling process's network
// namespace.
type socket struct {
	name  string // without the leading NUL
	inode uint64
	uid   int // the socket's owner as the kernel recorded it at creation; -1 unknown
}

// unix_diag (linux/unix_diag.h); x/sys/unix does not define these.
const (
	udiagShowName   = 0x01
	udiagShowUID    = 0x40
	unixDiagNameAtt = 0
	unixDiagUIDAtt  = 7

	sizeofUnixDiagReq = 24
	sizeofUnixDiagMsg = 16
)

// listSockets returns the bound abstract sockets of the namespace whose
// names keep matches. It asks the kernel's sock_diag for the names and
// owner uids (every socket, whoever holds it and whatever its PID
// namespace); where that is unavailable it reads the namespace's
// /proc/net/unix, which has no owners (uid -1).
func listSockets(keep func(name string) bool) ([]socket, error) {
	s, err := diag(keep)
	if err == nil {
		return s, nil
	}
	// The calling thread's namespace (/proc/net is the main thread's).
	s, perr := procNetUnix("/proc/thread-self/net/unix", keep)
	if perr != nil {
		return nil, errors.Join(err, perr)
	}
	return s, nil
}

// diag is diagSockets; tests replace it to take the /proc path.
var diag = diagSockets

// diagSockets dumps the namespace's unix sockets through NETLINK_SOCK_DIAG.
// A kernel that answers without owner uids (older than 5.3) is an error:
// the caller falls back to /proc, which at least finds the holders.
func diagSockets(keep func(string) bool) ([]socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag: bind: %w", err)
	}
	req := make([]byte, unix.SizeofNlMsghdr+sizeofUnixDiagReq)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence
	b := req[unix.SizeofNlMsghdr:]
	b[0] = unix.AF_UNIX
	ne.PutUint32(b[4:], ^uint32(0)) // every state
	ne.PutUint32(b[12:], udiagShowName|udiagShowUID)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag: send: %w", err)
	}
	var out []socket
	buf := make([]byte, 64<<10)
	sawUID := true
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("sock_diag: receive: %w", err)
		}
		msgs, err := parseNetlink(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.typ {
			case unix.NLMSG_DONE:
				if !sawUID {
					return nil, errors.New("sock_diag: the kernel reports no socket owners")
				}
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.data) >= 4 {
					if e := int32(ne.Uint32(m.data)); e != 0 {
						return nil, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return nil, errors.New("sock_diag: error message")
			case unix.SOCK_DIAG_BY_FAMILY:
				s, hasUID, ok := parseUnixDiag(m.data)
				if !ok || s.name == "" || !keep(s.name) {
					continue
				}
				sawUID = sawUID && hasUID
				out = append(out, s)
			}
		}
	}
}

type nlMsg struct {
	typ  uint16
	data []byte
}

// parseNetlink splits a netlink datagram into its messages.
func parseNetlink(b []byte) ([]nlMsg, error) {
	var out []nlMsg
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(ne.Uint32(b))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return nil, fmt.Errorf("sock_diag: bad message length %d", l)
		}
		out = append(out, nlMsg{typ: ne.Uint16(b[4:]), data: b[unix.SizeofNlMsghdr:l]})
		b = b[min(nlAlign(l), len(b)):]
	}
	return out, nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// parseUnixDiag decodes one unix_diag_msg with its attributes. Only
// abstract names are kept (a path socket's name is returned empty).
func parseUnixDiag(b []byte) (s socket, hasUID, ok bool) {
	if len(b) < sizeofUnixDiagMsg {
		return socket{}, false, false
	}
	ne := binary.NativeEndian
	s = socket{inode: uint64(ne.Uint32(b[4:])), uid: -1}
	attrs := b[sizeofUnixDiagMsg:]
	for len(attrs) >= 4 {
		l, typ := int(ne.Uint16(attrs)), ne.Uint16(attrs[2:])
		if l < 4 || l > len(attrs) {
			break
		}
		v := attrs[4:l]
		switch typ {
		case unixDiagNameAtt:
			if len(v) > 1 && v[0] == 0 {
				s.name = string(v[1:])
			}
		case unixDiagUIDAtt:
			if len(v) >= 4 {
				s.uid, hasUID = int(ne.Uint32(v)), true
			}
		}
		attrs = attrs[min(nlAlign(l), len(attrs)):]
	}
	return s, hasUID, true
}

// procNetUnix reads the abstract sockets from a /proc/net/unix file:
// "Num RefCount Protocol Flags Type St Inode Path", an abstract name shown
// with a leading '@' (and every NUL in it as '@').
func procNetUnix(path string, keep func(string) bool) ([]socket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcNetUnix(f, keep)
}

func parseProcNetUnix(r io.Reader, keep func(string) bool) ([]socket, error) {
	var out []socket
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue // header
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !strings.HasPrefix(f[7], "@") {
			continue
		}
		ino, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil {
			continue
		}
		name := strings.Join(f[7:], " ")[1:]
		if keep(name) {
			out = append(out, socket{name: name, inode: ino, uid: -1})
		}
	}
	return out, sc.Err()
}
