package netnstest

import (
	"net"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// ServeTCP listens on addr (network "tcp", "tcp4" or "tcp6") inside n and
// hands every accepted connection to handle in a goroutine of its own,
// which closes the connection when handle returns. The listener is made
// before ServeTCP returns (a failure fails t) and closed in t.Cleanup.
func ServeTCP(t testing.TB, n ns.NetNS, network, addr string, handle func(net.Conn)) {
	t.Helper()
	var l net.Listener
	err := n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
