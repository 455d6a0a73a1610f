package bgp

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// shutdownSessions shuts down (both directions, shutdown(2)) this process's
// TCP sockets that are BGP sessions to one of peers: connected to the peer's
// address and either to its port (sessions we opened) or from listenPort
// (sessions the peer opened; 0 when not listening). It returns how many it
// shut down.
//
// GoBGP keeps its connections to itself, so they are found among the
// process's descriptors (/proc/self/fd). shutdown does not release a
// descriptor, so the file stays GoBGP's to close; the peer sees a FIN and
// no NOTIFICATION, as when the process dies, and whatever GoBGP writes
// afterwards fails with EPIPE.
func shutdownSessions(peers []netip.AddrPort, listenPort int) (int, error) {
	if len(peers) == 0 {
		return 0, nil
	}
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("bgp: find session sockets: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return 0, fmt.Errorf("bgp: find session sockets: %w", err)
	}
	n := 0
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil || typ != unix.SOCK_STREAM {
			continue
		}
		remote, ok := sockAddr(unix.Getpeername(fd))
		if !ok {
			continue
		}
		local, ok := sockAddr(unix.Getsockname(fd))
		if !ok {
			continue
		}
		match := slices.ContainsFunc(peers, func(p netip.AddrPort) bool {
			return p.Addr() == remote.Addr() &&
				(p.Port() == remote.Port() || (listenPort != 0 && int(local.Port()) == listenPort))
		})
		if match && unix.Shutdown(fd, unix.SHUT_RDWR) == nil {
			n++
		}
	}
	return n, nil
}

// sockAddr is an IPv4 or IPv6 socket address as an AddrPort.
func sockAddr(sa unix.Sockaddr, err error) (netip.AddrPort, bool) {
	if err != nil {
		return netip.AddrPort{}, false
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}
