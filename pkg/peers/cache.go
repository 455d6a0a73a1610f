package peers

import "slices"

// parseCache keeps what Resolve derives from one record on its own (Parse
// and the claims' value strings), so a Validator re-validating 1,000
// records after one changed parses and formats one. Entries are checked
// against the whole record before use and dropped when their record is
// gone. Cached values are only read. Not safe for concurrent use.
type parseCache struct {
	gen     uint64
	entries map[string]*parsed // by record name
}

// parsed is one record's Parse result and its claims' value strings.
type parsed struct {
	rec     Record
	n       NodeInfo
	refused []Refusal
	values  []string // the claims' Value, in claims order
	gen     uint64   // the pass that last used it
}

// parse returns r's Parse result and its claims, from the cache when it
// holds this exact record. c may be nil (no caching).
func (c *parseCache) parse(r Record) (NodeInfo, []Refusal, []*item) {
	if c == nil {
		n, refused := Parse(r)
		if n.Name == "" {
			return n, refused, nil
		}
		return n, refused, claims(n, r.Updated, nil)
	}
	p := c.entries[r.Name]
	if p == nil || !sameRecord(p.rec, r) {
		p = &parsed{rec: r}
		p.rec.Blocks = slices.Clone(r.Blocks)
		p.n, p.refused = Parse(r)
		c.entries[r.Name] = p
		p.gen = c.gen
		if p.n.Name == "" {
			return p.n, p.refused, nil
		}
		its := claims(p.n, r.Updated, nil)
		p.values = make([]string, len(its))
		for i, it := range its {
			p.values[i] = it.Value
		}
		return p.n, p.refused, its
	}
	p.gen = c.gen
	if p.n.Name == "" {
		return p.n, p.refused, nil
	}
	return p.n, p.refused, claims(p.n, r.Updated, p.values)
}

// begin starts a pass; end drops the entries the pass did not use.
func (c *parseCache) begin() {
	if c.entries == nil {
		c.entries = map[string]*parsed{}
	}
	c.gen++
}

// end drops the entries of records the pass since begin did not see.
func (c *parseCache) end() {
	for name, p := range c.entries {
		if p.gen != c.gen {
			delete(c.entries, name)
		}
	}
}

// sameRecord reports whether a and b are the same record, field by field
// (Updated to the instant: Resolve reads no more of it).
func sameRecord(a, b Record) bool {
	return a.Name == b.Name && a.HostIPv4 == b.HostIPv4 && a.HostIPv6 == b.HostIPv6 && slices.Equal(a.Blocks, b.Blocks) &&
		a.VTEPMAC == b.VTEPMAC && a.VTEPMACv6 == b.VTEPMACv6 && a.TunnelIPv4 == b.TunnelIPv4 && a.TunnelIPv6 == b.TunnelIPv6 &&
		a.Updated.Equal(b.Updated)
}
