package firewall

import (
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
)

// NewIPTablesPair returns the IPv4 table of backend and, when ip6tables
// works, the IPv6 one; v6 is nil and v6Err says why when it does not. An
// IPv4 table that cannot be had is err. They are the tables of the
// caller's own namespace: with iptables-nft both read the ruleset
// generation (the namespace's, whatever the family) over one netlink
// socket opened here, in the calling thread's namespace, and kept until
// ClosePair, so the allowlist's check every second opens none (should it
// fail to open, each read opens its own).
func NewIPTablesPair(backend string) (v4, v6 Table, v6Err, err error) {
	t4, err := NewIPTables(ipset.IPv4, backend)
	if err != nil {
		return nil, nil, nil, err
	}
	if t4.nft {
		// Without the socket each read opens its own, as NewIPTables' do.
		t4.gen, _ = nlutil.Dial(unix.NETLINK_NETFILTER, netns.None())
	}
	t6, v6Err := NewIPTables(ipset.IPv6, backend)
	if v6Err != nil {
		return t4, nil, v6Err, nil
	}
	if t6.nft {
		t6.gen = t4.gen
	}
	return t4, t6, nil, nil
}

// ClosePair closes the socket the tables of NewIPTablesPair share; they
// then open one per read. Either may be nil.
func ClosePair(v4, v6 Table) error {
	var conn *nlutil.Conn
	for _, t := range []Table{v4, v6} {
		if it, ok := t.(*IPTables); ok && it != nil && it.gen != nil {
			conn, it.gen = it.gen, nil
		}
	}
	if conn == nil {
		return nil
	}
	return conn.Close()
}
