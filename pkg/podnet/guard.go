package podnet

import (
	"errors"
	"fmt"

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
}

// CheckGuards reads back the pod guard of every kept veth that exists,
// rewrites those that differ and removes the chains of veths that are gone
// (nothing without SetGuards). It reads no link state of its own: which
// kept veths exist is what the last Check found.
func (k *Keeper) CheckGuards() (Repairs, error) {
	if k.guards == nil {
		return Repairs{}, nil
	}
	n, err := k.checkGuards(true)
	if err != nil {
		err = fmt.Errorf("pod guards: %w", err)
	}
	return Repairs{Guards: n}, err
}

// guardSpec is the guard v should have.
func (k *Keeper) guardSpec(v HostVeth) podguard.Spec {
	return podguard.Spec{Device: v.Name, Addrs: v.Addrs, VXLANPort: k.guardPort}
}

// checkGuards reads the guards of the kept veths that exist (one dump of
// the table's chains, one of each chain's rules), rewrites those that
// differ and, with collect, removes the chains of veths that are neither
// kept nor present. A chain whose veth exists but is not kept yet (an ADD
// that has written its guard but not its record) is left alone. It
// returns how many guards it wrote or removed.
func (k *Keeper) checkGuards(collect bool) (int, error) {
	have, err := k.guards.Chains()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, name := range k.names {
		if !k.veth[name] {
			continue
		}
		spec := k.guardSpec(k.veths[name].HostVeth)
		st, err := k.guards.Read(spec, have)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st == podguard.OK {
			continue
		}
		if err := k.guards.Repair(spec, st); err != nil {
			errs = append(errs, err)
			continue
		}
		k.log.Info("pod guard repaired", "iface", name, "found", st.String())
		n++
	}
	if !collect {
		return n, errors.Join(errs...)
	}
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
