package state

import (
	"encoding/json"
	"fmt"
	"slices"
)

// EncodeNode validates n and returns its record bytes (compact JSON, the
// current record version): the value another datastore (etcd) stores for a
// node, the same record the file datastore keeps in nodes/.
func EncodeNode(n *Node) ([]byte, error) {
	if n == nil {
		return nil, fmt.Errorf("encode node: nil record")
	}
	if err := n.validate(); err != nil {
		return nil, fmt.Errorf("encode node: %w", err)
	}
	c := *n
	c.Version = RecordVersion
	data, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
	}
	return data, nil
}

// DecodeNode parses and validates record bytes written by EncodeNode (or
// anyone else): unknown versions, bad JSON and invalid values are errors.
func DecodeNode(data []byte) (*Node, error) {
	n := &Node{}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("parse node record: %w", err)
	}
	if n.Version != RecordVersion {
		return nil, fmt.Errorf("parse node record: unknown record version %d (want %d)", n.Version, RecordVersion)
	}
	if err := n.validate(); err != nil {
		return nil, fmt.Errorf("parse node record: %w", err)
	}
	return n, nil
}

// SameNode reports whether two records publish the same values (their
// versions and time stamps aside).
func SameNode(x, y *Node) bool {
	return x.Name == y.Name && x.HostIPv4 == y.HostIPv4 && x.HostIPv6 == y.HostIPv6 &&
		slices.Equal(x.Blocks, y.Blocks) && x.VTEPMAC == y.VTEPMAC && x.VTEPMACv6 == y.VTEPMACv6 &&
		x.TunnelIPv4 == y.TunnelIPv4 && x.TunnelIPv6 == y.TunnelIPv6 &&
		x.WireGuardPublicKey == y.WireGuardPublicKey && x.WireGuardPort == y.WireGuardPort &&
		x.BGPAS == y.BGPAS
}
