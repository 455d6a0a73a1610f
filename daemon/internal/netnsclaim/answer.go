package netnsclaim

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotHeld: no uid-0 process holds @routeletd or a fallback name in
// this network namespace.
var ErrNotHeld = errors.New("no routeletd holds this network namespace")

// answerTimeout bounds the write of an answer to a client that does not
// read.
const answerTimeout = time.Second

// Answer serves the claim's socket until Release: every connection from a
// uid-0 process gets msg, then is closed; connections from other users are
// closed unanswered. It returns at once.
func (c *Claim) Answer(msg []byte) {
	go func() {
		for {
			conn, err := c.l.AcceptUnix()
			if err != nil {
				return // Release closed the listener
			}
			if uid, err := peerUID(conn); err == nil && uid == 0 {
				_ = conn.SetWriteDeadline(time.Now().Add(answerTimeout))
				_, _ = conn.Write(msg)
			}
			conn.Close()
		}
	}()
}

// Dial connects to the routeletd of the calling thread's network
// namespace: the listener on @routeletd, or, while something else holds
// that name, on a fallback name (@routeletd/…), whichever the kernel says
// uid 0 listens on. The error wraps ErrNotHeld when none does.
func Dial() (*net.UnixConn, error) {
	c, err := dialRoot(Name)
	if err == nil {
		return c, nil
	}
	why := err
	ss, err := listSockets(func(n string) bool { return strings.HasPrefix(n, fallbackPrefix) })
	if err != nil {
		return nil, fmt.Errorf("%w (@%s: %v; list abstract sockets: %v)", ErrNotHeld, Name, why, err)
	}
	for _, s := range ss {
		if s.uid > 0 {
			continue // a squatter's name
		}
		if c, err := dialRoot(s.name); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w (@%s: %v)", ErrNotHeld, Name, why)
}

// errNotRoot: the listener of a name is not uid 0's.
var errNotRoot = errors.New("not held by uid 0")

// dialRoot connects to @name and keeps the connection only when its
// listener is uid 0's.
func dialRoot(name string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: "@" + name, Net: "unix"})
	if err != nil {
		return nil, err
	}
	uid, err := peerUID(c)
	if err == nil && uid != 0 {
		err = fmt.Errorf("%w: its listener is uid %d", errNotRoot, uid)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// peerUID returns the uid the kernel recorded for the other end of c: the
// connecting process for an accepted connection, the listening one for a
// dialled connection.
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return int(cred.Uid), nil
}
