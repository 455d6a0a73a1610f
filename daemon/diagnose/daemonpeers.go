package diagnose

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
)

// DatastoreFile is the datastore whose peers diagnose can read without
// the daemon (the state directory's nodes/).
const DatastoreFile = "file"

// PeersUnknown is what diagnose and status say when no daemon answers and
// the peers live in a datastore other than the file one.
func PeersUnknown(datastore string) string {
	return fmt.Sprintf("unknown — the daemon is down and the datastore is %s; only the running daemon reads its peers (start routeletd, or see the datastore itself)", datastore)
}

// fromDaemon turns the running daemon's state into what diagnose reads
// from nodes/ otherwise: this node's record (its published values), each
// peer's record (its validated values, the refused ones added back as
// written, so facts name them), and the daemon's own validation result.
// A peer refused whole has a record with its name only.
func fromDaemon(st *statusapi.State) (self peers.Record, recs map[string]peers.Record, res peers.Result, bad []error) {
	n := st.Node
	self = peers.Record{Name: n.Name, HostIPv4: n.HostIPv4, HostIPv6: n.HostIPv6, Blocks: n.LocalBlocks,
		VTEPMAC: n.VTEPMAC, VTEPMACv6: n.VTEPMACv6, TunnelIPv4: n.TunnelIPv4, TunnelIPv6: n.TunnelIPv6}
	// With encryption the WireGuard section carries the keys: this node's
	// (the one it publishes) and each keyed peer's, with the port of the
	// endpoint the daemon wants.
	wgKeys := map[string][2]string{}
	if wg := st.WireGuard; wg != nil {
		self.WireGuardPublicKey, self.WireGuardPort = wg.PublicKey, portString(wg.Port)
		for _, p := range wg.Peers {
			port := ""
			if ap, err := netip.ParseAddrPort(p.Endpoint); err == nil {
				port = portString(int(ap.Port()))
			}
			wgKeys[p.Node] = [2]string{p.PublicKey, port}
		}
	}
	recs = map[string]peers.Record{}
	for _, p := range st.Peers {
		r := peers.Record{Name: p.Name, HostIPv4: p.HostIPv4, HostIPv6: p.HostIPv6, Blocks: p.Blocks,
			VTEPMAC: p.VTEPMAC, VTEPMACv6: p.VTEPMACv6, TunnelIPv4: p.TunnelIPv4, TunnelIPv6: p.TunnelIPv6, Updated: p.LastChange,
			WireGuardPublicKey: wgKeys[p.Name][0], WireGuardPort: wgKeys[p.Name][1]}
		// The daemon validated these values; parsing them again only
		// types them.
		info, _ := peers.Parse(r)
		res.Peers = append(res.Peers, info)
		recs[p.Name] = r
	}
	for _, rf := range st.Datastore.Refusals {
		res.Refused = append(res.Refused, peers.Refusal{Node: rf.Node, Field: rf.Field, Value: rf.Value, Reason: rf.Reason})
		r, ok := recs[rf.Node]
		if !ok {
			r = peers.Record{Name: rf.Node}
		}
		field := map[string]*string{peers.FieldHostIPv4: &r.HostIPv4, peers.FieldHostIPv6: &r.HostIPv6,
			peers.FieldVTEPMAC: &r.VTEPMAC, peers.FieldVTEPMACv6: &r.VTEPMACv6,
			peers.FieldTunnelIPv4: &r.TunnelIPv4, peers.FieldTunnelIPv6: &r.TunnelIPv6,
			peers.FieldWireGuardPublicKey: &r.WireGuardPublicKey, peers.FieldWireGuardPort: &r.WireGuardPort}
		if f, ok := field[rf.Field]; ok {
			*f = rf.Value
		} else if rf.Field == peers.FieldBlock {
			r.Blocks = append(append([]string(nil), r.Blocks...), rf.Value)
		}
		if rf.Node != "" && rf.Node != n.Name {
			recs[rf.Node] = r
		}
	}
	for _, s := range st.Datastore.Unreadable {
		bad = append(bad, errors.New(s))
	}
	return self, recs, res, bad
}

// portString is a port as a record writes it ("" for none).
func portString(p int) string {
	if p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// peerSource names where the peers came from, for facts: nodes/ of the
// state directory, or the datastore as the running daemon sees it.
func (w *world) peerSource() string {
	if w.daemonPeers {
		return fmt.Sprintf("the %s datastore (as the running routeletd validated it)", w.datastore())
	}
	return w.cfg.StateDir + "/nodes"
}

// datastore is the configured datastore's name.
func (w *world) datastore() string {
	if w.cfg.Datastore == "" {
		return DatastoreFile
	}
	return w.cfg.Datastore
}

// unknownPeersStep says plainly that the peers cannot be known.
func (w *world) unknownPeersStep() Step {
	st := Step{ID: StepPeers, Status: Fail, Fact: "peers: " + w.peersUnknown,
		Problem: fmt.Sprintf("diagnose cannot check anything towards other nodes: their records are in the %s datastore", w.datastore()),
		Fix:     fmt.Sprintf("start routeletd on node %s: diagnose reads the peers from its state endpoint (%s)", w.cfg.NodeName, statusapi.SocketName)}
	if w.running {
		st.Fix = "routeletd reads them once it is ready (routeletd status says why it is not); run diagnose again then"
	}
	return st
}
