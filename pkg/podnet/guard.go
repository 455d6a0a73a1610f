package podnet

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/podguard"
)

// SetGuards makes the Keeper keep each kept veth's pod source check
// (pkg/podguard) in g: read back by CheckGuards and by a Check after a
// link event, rewritten when it differs (for the veth's Addrs and
// vxlanPort, 0 meaning podguard.DefaultVXLANPort), and, by CheckGuards,
// the chains of veths that no longer exist and are not kept removed. Call
// it before the first Check.
func (k *Keeper) SetGuards(g *podguard.Guards, vxlanPort uint16) {
	k.guards, k.guardPort = g, vxlanPort
	k.guardGen, _ = nlutil.Dial(unix.NETLINK_NETFILTER, netns.None()) // nil: NFTGeneration opens a socket per read
}

// guardsSeen is what a CheckGuards that found every guard right saw: the
// nf_tables generation and the Keeper's guardEpoch. ok is false when no
// such check has been made since the last change.
type guardsSeen struct {
	gen   uint32
	epoch uint64
	ok    bool
}

// CheckGuards reads back the pod guard of every kept veth that exists,
// rewrites those that differ and removes the chains of veths that are gone
// (nothing without SetGuards). It reads no link state of its own: which
// kept veths exist is what the last Check found. While neither the
// nf_tables ruleset (its generation: any write by anyone changes it) nor
// the kept veths changed since a check found every guard right, it reads
// nothing but the generation.
func (k *Keeper) CheckGuards() (Repairs, error) {
	if k.guards == nil {
		return Repairs{}, nil
	}
	gen, genErr := nlutil.NFTGeneration(k.guardGen)
	if genErr == nil && k.clean.ok && k.clean.gen == gen && k.clean.epoch == k.guardEpoch {
		return Repairs{}, nil
	}
	epoch := k.guardEpoch
	n, err := k.checkGuards()
	k.clean = guardsSeen{}
	if err != nil {
		err = fmt.Errorf("pod guards: %w", err)
	} else if n == 0 && genErr == nil {
		k.clean = guardsSeen{gen: gen, epoch: epoch, ok: true}
	}
	return Repairs{Guards: n}, err
}

// guardSpec is the guard v should have.
func (k *Keeper) guardSpec(v HostVeth) podguard.Spec {
	return podguard.Spec{Device: v.Name, Addrs: v.Addrs, VXLANPort: k.guardPort}
}

// checkGuards reads the guards of the kept veths that exist (one dump of
// the table's chains, one of each chain's rules), rewrites those that
// differ and removes the chains of veths that are neither kept nor
// present. A chain whose veth exists but is not kept yet (an ADD that has
// written its guard but not its record) is left alone. It returns how
// many guards it wrote or removed.
func (k *Keeper) checkGuards() (int, error) {
	have, err := k.guards.Chains()
	if err != nil {
		return 0, err
	}
	n, errs := k.checkGuardsIn(have, k.names)
	keep := make(map[string]bool, len(k.veths))
	for name := range k.veths {
		keep[name] = true
	}
	stale, err := podguard.Stale(have, keep, k.linkExists)
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range stale {
		if err := k.guards.Remove(name); err != nil {
			errs = append(errs, err)
			continue
		}
		k.log.Info("pod guard of a deleted veth removed", "iface", name)
		n++
	}
	return n, errors.Join(errs...)
}

// checkGuardsOf checks the guards of the kept veths among names that
// exist (one dump of the table's chains, one of the rules of each of
// theirs). It returns how many it rewrote.
func (k *Keeper) checkGuardsOf(names []string) (int, error) {
	have, err := k.guards.Chains()
	if err != nil {
		return 0, err
	}
	n, errs := k.checkGuardsIn(have, names)
	return n, errors.Join(errs...)
}

// checkGuardsIn checks the guard of each kept veth among names that
// exists (checkGuard, chains looked up in have) and returns how many it
// rewrote and what failed.
func (k *Keeper) checkGuardsIn(have map[string]*nftables.Chain, names []string) (int, []error) {
	n := 0
	var errs []error
	for _, name := range names {
		fixed, err := k.checkGuard(name, have)
		if fixed {
			n++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errs
}

// checkGuard reads the guard of the kept veth name, when it exists, with
// its chain looked up in have, and rewrites it when it differs; fixed: it
// was rewritten.
func (k *Keeper) checkGuard(name string, have map[string]*nftables.Chain) (fixed bool, err error) {
	if !k.veth[name] {
		return false, nil
	}
	spec := k.guardSpec(k.veths[name].HostVeth)
	st, err := k.guards.Read(spec, have)
	if err != nil || st == podguard.OK {
		return false, err
	}
	if err := k.guards.Repair(spec, st); err != nil {
		return false, err
	}
	k.log.Info("pod guard repaired", "iface", name, "found", st.String())
	return true, nil
}

// linkExists reports whether a link named name exists.
func (k *Keeper) linkExists(name string) (bool, error) {
	_, err := k.h.LinkByName(name)
	switch {
	case err == nil:
		return true, nil
	case nlutil.LinkNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("link %s: %w", name, err)
}
