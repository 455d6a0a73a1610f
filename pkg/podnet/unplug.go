package podnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// TeardownThen deletes the host veth hostIface as Teardown does and runs
// gone, the cleanup of what the veth leaves behind (its pod guard), once
// the veth is gone, and as soon as the kernel has taken it off the node:
// when the kernel announces the deletion (RTM_DELLINK) the device is
// unlisted, its receive backlogs are flushed and every hook on it is
// detached, but the deletion still waits for an RCU grace period or more
// before it returns; gone runs during that wait. Without the announcement
// (the subscription failed, or its messages overflowed) gone runs once the
// deletion has returned, and at once when there is no such link. When the
// deletion fails without having been announced, or the link is not a
// veth, gone does not run. TeardownThen returns when both are done: the
// deletion's error, and gone's. In a binary that called CarrierMain the
// request goes through a carrier (see carrier.go) and TeardownThen returns
// once the deletion is announced and gone has run, leaving the kernel's
// wait to the carrier; without the announcement it waits for the carrier.
// The carrier keeps hold (if not nil) open until the kernel has answered:
// the plugin's nf_tables socket, whose release would otherwise wait, holding
// the namespace's nf_tables mutex, for the cleanup of gone's commit.
func TeardownThen(hostIface string, hold *os.File, gone func() error) (delErr, goneErr error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in node netns: %w", err), nil
	}
	defer h.Close()
	l, err := h.LinkByName(hostIface)
	if err != nil {
		if nlutil.NotFound(err) {
			return nil, gone()
		}
		return fmt.Errorf("look up host veth %s: %w", hostIface, err), nil
	}
	if t := l.Type(); t != "veth" {
		return fmt.Errorf("host interface %s is a %s, not a veth: not deleting it", hostIface, t), nil
	}
	w, werr := watchDeletion(l.Attrs().Index)
	if werr != nil {
		w = nil
	}
	var deleted <-chan error
	carried := false
	if w != nil && carrierReady.Load() {
		if exited, err := startCarrier(l.Attrs().Index, hold); err == nil {
			deleted, carried = carriedDeletion(exited, hostIface), true
		}
	}
	if !carried {
		ch := make(chan error, 1)
		go func() {
			err := h.LinkDel(l)
			if err != nil && !nlutil.NotFound(err) {
				err = fmt.Errorf("delete host veth %s: %w", hostIface, err)
			} else {
				err = nil
			}
			ch <- err
		}()
		deleted = ch
	}
	var announced <-chan struct{}
	if w != nil {
		defer w.close()
		announced = w.seen
	}
	select {
	case <-announced:
		goneErr = gone() // before the deletion has returned
		if carried {
			return nil, goneErr // the carrier waits for the kernel
		}
		return <-deleted, goneErr
	case delErr = <-deleted:
	}
	if delErr != nil {
		return delErr, nil
	}
	return nil, gone()
}

// carriedDeletion turns a carrier's outcome into the deletion's error:
// ENODEV (the link went meanwhile) is success.
func carriedDeletion(exited <-chan error, hostIface string) <-chan error {
	out := make(chan error, 1)
	go func() {
		err := <-exited
		if err == nil || errors.Is(err, unix.ENODEV) {
			out <- nil
			return
		}
		out <- fmt.Errorf("delete host veth %s: %w", hostIface, err)
	}()
	return out
}

// deletionWatch waits on a route netlink socket subscribed to link
// notifications for the RTM_DELLINK of one ifindex.
type deletionWatch struct {
	fd      int
	seen    chan struct{} // closed when the announcement arrived
	stopped chan struct{} // closed when the reader has returned
	stop    atomic.Bool
}

// watchPoll is how long a read of the watch blocks before it looks whether
// it should stop.
const watchPoll = 5 // milliseconds

// watchDeletion subscribes, in the calling thread's namespace, to link
// notifications and starts reading them for the deletion of index. It must
// run before the deletion is requested.
func watchDeletion(index int) (*deletionWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link notification socket: %w", err)
	}
	tv := unix.NsecToTimeval(watchPoll * 1e6)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link notification socket: receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.RTNLGRP_LINK - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link notification socket: subscribe: %w", err)
	}
	w := &deletionWatch{fd: fd, seen: make(chan struct{}), stopped: make(chan struct{})}
	go w.read(int32(index))
	return w, nil
}

// read returns when the deletion of index is announced, the messages
// overflowed or failed, or stop is set.
func (w *deletionWatch) read(index int32) {
	defer close(w.stopped)
	buf := make([]byte, 64<<10)
	for !w.stop.Load() {
		n, _, err := unix.Recvfrom(w.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n < unix.NLMSG_HDRLEN {
			return // ENOBUFS: the announcement may be lost; the deletion's return stands in
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return
		}
		for _, m := range msgs {
			if m.Header.Type != unix.RTM_DELLINK || len(m.Data) < unix.SizeofIfInfomsg {
				continue
			}
			// struct ifinfomsg: family, pad, type (u16), then the index (s32).
			if int32(binary.NativeEndian.Uint32(m.Data[4:8])) == index {
				close(w.seen)
				return
			}
		}
	}
}

// close stops the reader and releases the socket.
func (w *deletionWatch) close() {
	w.stop.Store(true)
	<-w.stopped
	unix.Close(w.fd)
}
