// Package netiptest has the netip helpers tests share.
package netiptest

import "net/netip"

// Prefixes parses CIDRs, panicking on a bad one (test input is fixed).
func Prefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, s := range cidrs {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
