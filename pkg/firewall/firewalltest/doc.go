// Package firewalltest holds an in-memory fake of the firewall package's
// kernel seam for tests that need no root: FakeTable (the raw, filter and
// nat tables as `iptables -S` lists them, with or without an nf_tables
// generation, failure injection) for firewall.Table.
package firewalltest
