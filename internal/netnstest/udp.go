package netnstest

import (
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
)

// SendUDP sends one IPv4 datagram holding payload from inside n to dst
// (host:port).
func SendUDP(n ns.NetNS, dst, payload string) error {
	err := n.Do(func(ns.NetNS) error {
		c, err := net.Dial("udp4", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
	if err != nil {
		return fmt.Errorf("send UDP to %s from %s: %w", dst, Name(n), err)
	}
	return nil
}
