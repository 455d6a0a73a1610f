package netnstest

import (
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
)

// SendUDP sends one datagram holding payload from inside n to dst
// (host:port), over IPv6 when dst's host is an IPv6 address, else over
// IPv4 (UDPNetwork).
func SendUDP(n ns.NetNS, dst, payload string) error {
	err := n.Do(func(ns.NetNS) error {
		c, err := net.Dial(UDPNetwork(dst), dst)
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

// UDPNetwork returns "udp6" when addr (host:port) names an IPv6 host,
// else "udp4": a socket of the address's own family, never a dual-stack
// one that would report IPv4 peers as mapped addresses.
func UDPNetwork(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return "udp6"
	}
	return "udp4"
}
