package nlutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// recvBufSize is the receive buffer of every exchange: the kernel never
// makes a dump message larger than the reader's buffer or 32 KiB, so one
// of this size holds any answer.
const recvBufSize = 32 << 10

// recvBufs recycles receive buffers between exchanges, so a steady stream of
// small requests (a periodic check) allocates none.
var recvBufs = sync.Pool{New: func() any { b := make([]byte, recvBufSize); return &b }}

// Conn is one blocking netlink socket for request–answer exchanges with the
// kernel, dumps included, one at a time. It exists for the requests a
// daemon repeats every second or so: unlike nl.NetlinkRequest.Execute it
// makes no syscall beyond the send and the receives, goes through no
// poller and no deadline, and reads into a recycled buffer. Safe for
// concurrent use (exchanges are serialised).
type Conn struct {
	mu  sync.Mutex
	fd  int
	seq uint32
}

// Dial opens a Conn for protocol (e.g. unix.NETLINK_NETFILTER) in the
// network namespace ns, or with netns.None() in the calling thread's. The
// socket stays in that namespace. Sends and receives time out after
// nl.SocketTimeoutTv, as the library's sockets do.
func Dial(protocol int, ns netns.NsHandle) (*Conn, error) {
	var fd int
	open := func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
		return err
	}
	var err error
	if ns.IsOpen() {
		err = InNetNS(ns, open)
	} else {
		err = open()
	}
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := nl.SocketTimeoutTv
	for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("netlink socket timeout: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket bind: %w", err)
	}
	return &Conn{fd: fd}, nil
}

// InNetNS runs f on a locked thread moved into ns, then moves the thread
// back. A thread that cannot be moved back stays locked, so the runtime
// ends it with the goroutine instead of reusing it in the wrong namespace.
func InNetNS(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns: %w", err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("return to netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Once is Execute on a Conn opened for it in the calling thread's
// namespace and closed after.
func Once(protocol int, req *nl.NetlinkRequest, each func(msg []byte) error) error {
	c, err := Dial(protocol, netns.None())
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Execute(req, each)
}

// Execute sends req (with a sequence number of the Conn's own) and reads
// the kernel's answer to it: each payload (the bytes after the netlink
// header) goes to each, which may be nil. It ends with the answer's end:
// NLMSG_DONE of a dump, the acknowledgement of a request with NLM_F_ACK,
// or the single answer of one without. An error the kernel reports is
// returned as its syscall.Errno; an answer marked NLM_F_DUMP_INTR is read
// to its end and reported as nl.ErrDumpInterrupted (see Retry). An error
// from each stops the calls to each, not the reading, and is returned
// after the answer's end. Other early returns (an error the kernel
// reports in the middle of a dump, a malformed or oversized message) can
// leave the rest of the answer queued; the next Execute skips it by its
// sequence number.
func (c *Conn) Execute(req *nl.NetlinkRequest, each func(msg []byte) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	seq := c.seq
	msg := req.Serialize()
	binary.NativeEndian.PutUint32(msg[8:12], seq)
	binary.NativeEndian.PutUint32(msg[12:16], 0)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	wantAck := req.Flags&unix.NLM_F_ACK != 0
	bp := recvBufs.Get().(*[]byte)
	defer recvBufs.Put(bp)
	buf := *bp
	var cbErr error
	intr := false
	for {
		n, err := recv(c.fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		if n > len(buf) {
			return fmt.Errorf("netlink receive: answer of %d bytes exceeds the %d-byte buffer", n, len(buf))
		}
		b := buf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			typ := binary.NativeEndian.Uint16(b[4:6])
			flags := binary.NativeEndian.Uint16(b[6:8])
			mseq := binary.NativeEndian.Uint32(b[8:12])
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return fmt.Errorf("netlink receive: malformed message (length %d of %d bytes)", l, len(b))
			}
			data := b[unix.SizeofNlMsghdr:l]
			b = b[min(nlmAlign(l), len(b)):]
			if mseq != seq {
				continue // the rest of an earlier exchange that timed out
			}
			if flags&unix.NLM_F_DUMP_INTR != 0 {
				intr = true
			}
			switch typ {
			case unix.NLMSG_NOOP:
				continue
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				if len(data) >= 4 {
					if errno := -int32(binary.NativeEndian.Uint32(data[0:4])); errno != 0 {
						return syscall.Errno(errno)
					}
				}
				if typ == unix.NLMSG_ERROR && flags&unix.NLM_F_MULTI != 0 {
					continue // an acknowledgement inside a dump; DONE ends it
				}
				return done(cbErr, intr)
			}
			if each != nil && cbErr == nil {
				cbErr = each(data)
			}
			if flags&unix.NLM_F_MULTI == 0 && !wantAck {
				return done(cbErr, intr)
			}
		}
	}
}

// recv receives one datagram into buf with MSG_TRUNC: n is the datagram's
// whole length even when buf was too short. Unlike unix.Recvfrom it asks
// for no source address, so it allocates nothing.
func recv(fd int, buf []byte) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_TRUNC, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// done is the outcome of an exchange read to its end.
func done(cbErr error, intr bool) error {
	if cbErr != nil {
		return cbErr
	}
	if intr {
		return nl.ErrDumpInterrupted
	}
	return nil
}

// nlmAlign rounds a message length up to netlink's 4-byte alignment.
func nlmAlign(l int) int { return (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// SetStrictCheck turns on NETLINK_GET_STRICT_CHK (kernel 4.20 and later):
// the kernel then checks dump requests strictly and applies the filters
// they carry, such as a route dump's table, instead of ignoring them.
func (c *Conn) SetStrictCheck() error {
	return unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
}
