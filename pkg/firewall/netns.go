package firewall

import (
	"github.com/containernetworking/plugins/pkg/ns"
)

// NetNS is a Table whose every exec runs inside the network namespace at
// Path (e.g. /var/run/netns/node1), for tests and for managing a namespace
// other than the daemon's own. Each call switches a locked OS thread into
// the namespace; the iptables child forks from that thread and so inherits
// the namespace.
type NetNS struct {
	T    Table
	Path string
}

var _ Table = NetNS{}

func (n NetNS) do(f func() error) error {
	return ns.WithNetNSPath(n.Path, func(ns.NetNS) error { return f() })
}

// ListTable implements Table.
func (n NetNS) ListTable(table string) (out []string, err error) {
	err = n.do(func() error { out, err = n.T.ListTable(table); return err })
	return out, err
}

// Generation implements Table.
func (n NetNS) Generation() (gen uint32, ok bool, err error) {
	err = n.do(func() error { gen, ok, err = n.T.Generation(); return err })
	return gen, ok, err
}

// HasTable implements Table.
func (n NetNS) HasTable(table string) (ok bool, err error) {
	err = n.do(func() error { ok, err = n.T.HasTable(table); return err })
	return ok, err
}

// DeleteTable implements Table.
func (n NetNS) DeleteTable(table string, gen uint32) error {
	return n.do(func() error { return n.T.DeleteTable(table, gen) })
}

// DeleteBaseChain implements Table.
func (n NetNS) DeleteBaseChain(table, chain string, gen uint32) error {
	return n.do(func() error { return n.T.DeleteBaseChain(table, chain, gen) })
}

// ListById implements Table.
func (n NetNS) ListById(table, chain string, id int) (out string, err error) {
	err = n.do(func() error { out, err = n.T.ListById(table, chain, id); return err })
	return out, err
}

// NewChain implements Table.
func (n NetNS) NewChain(table, chain string) error {
	return n.do(func() error { return n.T.NewChain(table, chain) })
}

// Append implements Table.
func (n NetNS) Append(table, chain string, spec ...string) error {
	return n.do(func() error { return n.T.Append(table, chain, spec...) })
}

// Insert implements Table.
func (n NetNS) Insert(table, chain string, pos int, spec ...string) error {
	return n.do(func() error { return n.T.Insert(table, chain, pos, spec...) })
}

// DeleteById implements Table.
func (n NetNS) DeleteById(table, chain string, id int) error {
	return n.do(func() error { return n.T.DeleteById(table, chain, id) })
}

// ClearChain implements Table.
func (n NetNS) ClearChain(table, chain string) error {
	return n.do(func() error { return n.T.ClearChain(table, chain) })
}

// DeleteChain implements Table.
func (n NetNS) DeleteChain(table, chain string) error {
	return n.do(func() error { return n.T.DeleteChain(table, chain) })
}
