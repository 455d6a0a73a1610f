// Package netnsclaim makes routeletd one per network namespace, in a way
// no unprivileged local user can take from it.
//
// A routeletd binds the abstract unix socket @routeletd. Abstract names
// belong to the network namespace (not to a mount namespace or a state
// directory) and vanish with the process, so a second routeletd in the
// namespace — another state directory, a DaemonSet pod with hostNetwork
// beside a host-installed one — finds the name taken. But any local user
// can bind any abstract name, so a taken name is judged by who took it:
// the kernel records a socket's owner uid at creation, which its holder
// cannot forge (sock_diag reports it). A name owned by uid 0 (or, where
// the kernel cannot tell, held by a uid-0 process or by one this PID
// namespace cannot see) is another routeletd: Claim refuses, naming it.
// A name an unprivileged user owns is not routeletd's: Claim reports it
// (uid, pid, executable) and binds a fallback name of its own,
// @routeletd/<pid>-<random>.
//
// Whichever name it got, Claim then looks at every socket named
// @routeletd or @routeletd/… in the namespace: one that another root
// process owns is another routeletd (one that started while a squatter
// held @routeletd), and Claim refuses. Each claimant binds before it
// looks, so of two starting together at least one sees the other (both
// may refuse; a restart settles it); a squatter's names are never
// counted, so it can stop neither a routeletd nor `routeletd cleanup`.
//
// The claim's socket also tells a root process of the namespace which
// routeletd holds it (Claim.Answer, Dial): the subcommands find the
// running daemon, whatever its state directory, without being told. The
// kernel vouches for both ends (SO_PEERCRED): the holder answers only a
// uid-0 client, and Dial trusts only a listener of uid 0, so neither an
// unprivileged squatter nor an unprivileged client takes part.
package netnsclaim

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Name is the abstract socket a routeletd binds (without the '@').
const Name = "routeletd"

// fallbackPrefix starts the names bound while an unprivileged process holds
// Name.
const fallbackPrefix = Name + "/"

// ErrRunning marks a refusal because another routeletd holds the
// namespace.
var ErrRunning = errors.New("another routeletd is running in this network namespace")

// Holder describes who holds an abstract socket.
type Holder struct {
	Name string // the socket's name with its '@'
	// UID owns the socket (the kernel's record of its creator); -1 when
	// the kernel cannot tell.
	UID int
	// Procs hold the socket (an open file descriptor), as far as this PID
	// namespace sees them.
	Procs []Proc
}

// Proc is one process holding a socket.
type Proc struct {
	PID  int
	EUID int // -1 unknown
	Exe  string
}

// Privileged reports whether h is to be taken for a routeletd: its owner
// is uid 0; or, where no owner is known, a holder runs as uid 0 or none is
// visible (it cannot be judged, so it is not ignored).
func (h Holder) Privileged() bool {
	if h.UID >= 0 {
		return h.UID == 0
	}
	if len(h.Procs) == 0 {
		return true
	}
	for _, p := range h.Procs {
		if p.EUID <= 0 {
			return true
		}
	}
	return false
}

// String names the holder for a log line or an error.
func (h Holder) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "abstract socket %s", h.Name)
	if h.UID >= 0 {
		fmt.Fprintf(&b, " owned by uid %d", h.UID)
	}
	if len(h.Procs) == 0 {
		b.WriteString(", held by no process this PID namespace sees")
	}
	for i, p := range h.Procs {
		if i == 0 {
			b.WriteString(", held by")
		} else {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " pid %d", p.PID)
		if p.EUID >= 0 {
			fmt.Fprintf(&b, " (uid %d", p.EUID)
			if p.Exe != "" {
				fmt.Fprintf(&b, ", %s", strconv.Quote(p.Exe))
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

// Claim is the held claim on the namespace.
type Claim struct {
	l *net.UnixListener
	// Name is the socket bound, with its '@'.
	Name string
	// Squatter, when not nil, held Name and was ignored as unprivileged.
	Squatter *Holder
}

// Release gives the namespace up.
func (c *Claim) Release() { c.l.Close() }

// retryFor bounds how long Take keeps trying while another routeletd
// seems to hold the namespace: a daemon just killed may hold its socket a
// moment longer through a child between fork and exec (which shares its
// descriptors until the exec closes them).
const retryFor = time.Second

// Take claims the calling process's network namespace for a routeletd (see
// the package doc). The error wraps ErrRunning when another routeletd holds
// it, naming that one; Take tries again for up to a second before it says
// so.
func Take() (*Claim, error) {
	deadline := time.Now().Add(retryFor)
	for {
		c, err := take()
		if !errors.Is(err, ErrRunning) || !time.Now().Before(deadline) {
			return c, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// take is one attempt of Take.
func take() (*Claim, error) {
	c := &Claim{Name: "@" + Name}
	l, err := listen(Name)
	var h Holder
	for try := 0; errors.Is(err, unix.EADDRINUSE); try++ {
		var herr error
		if h, herr = holderOf(Name); herr == nil {
			break
		}
		if try == 2 {
			return nil, fmt.Errorf("%w (abstract socket @%s is bound; cannot tell by whom: %v)", ErrRunning, Name, herr)
		}
		l, err = listen(Name) // the holder is gone: try again
	}
	if errors.Is(err, unix.EADDRINUSE) {
		if h.Privileged() {
			return nil, fmt.Errorf("%w (%s)", ErrRunning, h)
		}
		c.Squatter = &h
		for range 8 {
			var r [8]byte
			_, _ = rand.Read(r[:])
			name := fmt.Sprintf("%s%d-%s", fallbackPrefix, os.Getpid(), hex.EncodeToString(r[:]))
			c.Name = "@" + name
			if l, err = listen(name); !errors.Is(err, unix.EADDRINUSE) {
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bind abstract socket %s: %w", c.Name, err)
	}
	c.l = l
	own, err := inodeOf(l)
	if err != nil {
		l.Close()
		return nil, err
	}
	others, err := listSockets(func(n string) bool { return n == Name || strings.HasPrefix(n, fallbackPrefix) })
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("list abstract sockets: %w", err)
	}
	for _, s := range others {
		if s.inode == own {
			continue
		}
		h := Holder{Name: "@" + s.name, UID: s.uid, Procs: holders(s.inode)}
		if h.Privileged() {
			l.Close()
			return nil, fmt.Errorf("%w (%s)", ErrRunning, h)
		}
	}
	return c, nil
}

// listen binds and listens on the abstract socket @name.
func listen(name string) (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
}

// inodeOf returns the socket inode of l (the one sock_diag and /proc name).
func inodeOf(l *net.UnixListener) (uint64, error) {
	rc, err := l.SyscallConn()
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("stat own socket: %w", serr)
	}
	return st.Ino, nil
}

// holderOf describes who holds the abstract socket @name.
func holderOf(name string) (Holder, error) {
	ss, err := listSockets(func(n string) bool { return n == name })
	if err != nil {
		return Holder{}, err
	}
	if len(ss) == 0 {
		return Holder{}, fmt.Errorf("no socket named @%s listed", name)
	}
	return Holder{Name: "@" + name, UID: ss[0].uid, Procs: holders(ss[0].inode)}, nil
}

// holders finds the processes with an open descriptor of socket inode ino
// in /proc.
func holders(ino uint64) []Proc {
	return procHolders("/proc", ino)
}

func procHolders(proc string, ino uint64) []Proc {
	want := "socket:[" + strconv.FormatUint(ino, 10) + "]"
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && l == want {
				exe, _ := os.Readlink(filepath.Join(proc, e.Name(), "exe"))
				out = append(out, Proc{PID: pid, EUID: procEUID(filepath.Join(proc, e.Name(), "status")), Exe: exe})
				break
			}
		}
	}
	return out
}

// procEUID reads the effective uid from a /proc/<pid>/status file; -1 when
// it cannot.
func procEUID(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				if u, err := strconv.Atoi(f[1]); err == nil {
					return u
				}
			}
		}
	}
	return -1
}
