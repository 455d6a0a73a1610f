package rules

import "github.com/routelet/routelet/pkg/ipset"

// NewIPTablesPair returns the IPv4 table of backend and, when ip6tables
// works, the IPv6 one; v6 is nil and v6Err says why when it does not. An
// IPv4 table that cannot be had is err.
func NewIPTablesPair(backend string) (v4, v6 Table, v6Err, err error) {
	t4, err := NewIPTables(ipset.IPv4, backend)
	if err != nil {
		return nil, nil, nil, err
	}
	t6, v6Err := NewIPTables(ipset.IPv6, backend)
	if v6Err != nil {
		return t4, nil, v6Err, nil
	}
	return t4, t6, nil, nil
}
