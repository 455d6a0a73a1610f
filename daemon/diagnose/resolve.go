package diagnose

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// resolve turns one argument into a path end: a pod IP, a node name, a
// pod's namespace/name, or a container ID (or a unique prefix of one).
func (w *world) resolve(which, arg string) (End, error) {
	if arg == "" {
		return End{}, &ArgError{Which: which, Value: arg, Reason: "empty: want a pod (namespace/name or container ID), a pod IP or a node name"}
	}
	if a, err := netip.ParseAddr(arg); err == nil {
		return w.resolveAddr(which, arg, a.Unmap())
	}
	if arg == w.cfg.NodeName {
		return End{Arg: arg, Kind: KindNode, Node: arg, local: true, Addrs: w.self.HostIPs()}, nil
	}
	if r, ok := w.records[arg]; ok {
		return End{Arg: arg, Kind: KindNode, Node: arg, Addrs: recordHostIPs(r)}, nil
	}
	var keys []string
	if strings.Contains(arg, "/") {
		for k, wl := range w.wl {
			if wl.PodNamespace+"/"+wl.PodName == arg {
				keys = append(keys, k)
			}
		}
	} else {
		for k, wl := range w.wl {
			if strings.HasPrefix(wl.ContainerID, arg) {
				keys = append(keys, k)
			}
		}
	}
	switch key, err := pickWorkload(w.wl, keys); {
	case err != "":
		return End{}, &ArgError{Which: which, Value: arg, Reason: err}
	case key != "":
		return w.podEnd(arg, key), nil
	}
	return End{}, &ArgError{Which: which, Value: arg, Reason: fmt.Sprintf(
		"no pod (namespace/name or container ID) on node %s, pod IP or node record (nodes/%s.json) has that name; a pod on another node is named by its IP",
		w.cfg.NodeName, arg)}
}

// pickWorkload chooses among the records an argument matched: one
// container (its eth0 attachment when it has several); "" when none; an
// error text when the argument names several containers.
func pickWorkload(wl map[string]*state.Workload, keys []string) (string, string) {
	slices.Sort(keys)
	if len(keys) == 0 {
		return "", ""
	}
	ids := map[string]bool{}
	for _, k := range keys {
		ids[wl[k].ContainerID] = true
	}
	if len(ids) > 1 {
		return "", fmt.Sprintf("names %d containers (%s): give more of the container ID", len(ids), strings.Join(slices.Sorted(maps.Keys(ids)), ", "))
	}
	for _, k := range keys {
		if wl[k].IfName == "eth0" {
			return k, ""
		}
	}
	return keys[0], ""
}

// podEnd is the end for the workload record under key.
func (w *world) podEnd(arg, key string) End {
	wl := w.wl[key]
	e := End{Arg: arg, Kind: KindPod, Node: w.cfg.NodeName, local: true, w: wl, key: key, Pod: wl.ContainerID}
	if wl.PodName != "" {
		e.Pod = wl.PodNamespace + "/" + wl.PodName
	}
	for _, s := range wl.IPs {
		if p, err := netip.ParsePrefix(s); err == nil && !slices.Contains(e.Addrs, p.Addr()) {
			e.Addrs = append(e.Addrs, p.Addr())
		}
	}
	return e
}

// resolveAddr finds what holds address a: a pod of ours (by its record),
// this node, a peer (its host or tunnel address), a peer's block, our own
// block without a pod, or nothing.
func (w *world) resolveAddr(which, arg string, a netip.Addr) (End, error) {
	if why := nodespace.SpecialRange(netip.PrefixFrom(a, a.BitLen())); why != "" {
		return End{}, &ArgError{Which: which, Value: arg, Reason: "is in " + why + ", never a pod or node address"}
	}
	if key, ok := w.desired.Owner[a]; ok {
		return w.podEnd(arg, key), nil
	}
	for _, key := range slices.Sorted(maps.Keys(w.wl)) {
		if slices.ContainsFunc(w.wl[key].IPs, func(s string) bool {
			p, err := netip.ParsePrefix(s)
			return err == nil && p.Addr() == a
		}) {
			return w.podEnd(arg, key), nil // a record the daemon refused
		}
	}
	if slices.Contains(w.self.HostIPs(), a) {
		return End{Arg: arg, Kind: KindNode, Node: w.cfg.NodeName, local: true, Addrs: []netip.Addr{a}}, nil
	}
	for _, name := range slices.Sorted(maps.Keys(w.records)) {
		if slices.Contains(recordHostIPs(w.records[name]), a) {
			return End{Arg: arg, Kind: KindNode, Node: name, Addrs: []netip.Addr{a}}, nil
		}
	}
	// A validated peer's block first: a refused claim on the same space
	// loses to it, as in the daemon.
	for _, name := range slices.Sorted(maps.Keys(w.valid)) {
		for _, b := range w.valid[name].Blocks {
			if b.Contains(a) {
				return End{Arg: arg, Kind: KindRemotePod, Node: name, Addrs: []netip.Addr{a}, Block: b}, nil
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.records)) {
		for _, b := range rawBlocks(w.records[name]) {
			if b.Contains(a) {
				return End{Arg: arg, Kind: KindRemotePod, Node: name, Addrs: []netip.Addr{a}, Block: b}, nil
			}
		}
	}
	if slices.ContainsFunc(w.local, func(b netip.Prefix) bool { return b.Contains(a) }) {
		return End{Arg: arg, Kind: KindPod, Node: w.cfg.NodeName, local: true, Addrs: []netip.Addr{a}}, nil
	}
	return End{Arg: arg, Kind: KindUnknown, Addrs: []netip.Addr{a}}, nil
}

// recordHostIPs returns the host IPs a record carries (parsed, unchecked).
func recordHostIPs(r peers.Record) []netip.Addr {
	var out []netip.Addr
	for _, s := range []string{r.HostIPv4, r.HostIPv6} {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// families returns the IP families an end has.
func (w *world) families(e End) []int {
	var out []int
	add := func(v int) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	switch {
	case e.Kind == KindNode && e.local:
		for _, b := range w.local {
			add(familyOf(b.Addr()))
		}
	case e.Kind == KindNode:
		for _, b := range rawBlocks(w.records[e.Node]) {
			add(familyOf(b.Addr()))
		}
	}
	for _, a := range e.Addrs {
		if e.Kind != KindNode {
			add(familyOf(a))
		}
	}
	slices.Sort(out)
	return out
}

// addr returns the end's address of family v (for conntrack and the probe):
// a pod's address; for a node its tunnel address (its first block's first
// address), which its overlay device holds.
func (w *world) addr(e End, v int) (netip.Addr, bool) {
	if e.Kind == KindNode {
		var blocks []netip.Prefix
		if e.local {
			blocks = w.local
		} else {
			blocks = rawBlocks(w.records[e.Node])
		}
		for _, b := range blocks {
			if familyOf(b.Addr()) == v {
				return b.Addr(), true
			}
		}
		return netip.Addr{}, false
	}
	for _, a := range e.Addrs {
		if familyOf(a) == v {
			return a, true
		}
	}
	return netip.Addr{}, false
}
