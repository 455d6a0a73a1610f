package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// cmdGC removes every attachment of this network (record.Network equals the
// config's name) that is not in cni.dev/valid-attachments (or the older
// cni.dev/attachments): its host veth, its addresses and its record.
// Attachments of other networks sharing the state directory are never touched.
// With a delegated IPAM plugin, that plugin's GC runs as well.
func cmdGC(args *skel.CmdArgs) error {
	c, e := loadConfig(args.StdinData)
	if e != nil {
		return e
	}
	keep := map[ipam.Attachment]bool{}
	for _, lists := range [][]types.GCAttachment{c.raw.ValidAttachments, c.raw.LegacyAttachments} {
		for _, a := range lists {
			keep[ipam.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
		}
	}
	store, err := state.Open(c.StateDir)
	if err != nil {
		return cniErr(types.ErrIOFailure, "stateDir %s: %v", c.StateDir, err)
	}
	recs, bad := store.ListWorkloads()
	for _, b := range bad {
		slog.Warn("skipping unreadable workload record", "err", b)
	}
	var alloc *ipam.Allocator
	var errs []error
	for _, r := range recs {
		att := ipam.Attachment{ContainerID: r.ContainerID, IfName: r.IfName}
		if r.Network != c.Name || keep[att] {
			continue
		}
		slog.Info("collecting stale attachment", "container", r.ContainerID, "ifname", r.IfName, "iface", r.HostIface)
		var stepErrs []error
		if r.HostIface != "" && !claimedByLive(recs, keep, c.Name, r) {
			if err := dp.Teardown(r.HostIface); err != nil {
				stepErrs = append(stepErrs, err)
			}
		}
		if c.Delegate == "" {
			if alloc == nil {
				if alloc, err = openAllocator(c, store); err != nil {
					return asCNIErr("gc", err)
				}
			}
			if err := alloc.Release(context.Background(), att); err != nil {
				stepErrs = append(stepErrs, fmt.Errorf("release %s/%s: %w", r.ContainerID, r.IfName, err))
			}
		}
		if len(stepErrs) == 0 {
			if err := store.DeleteWorkload(r.ContainerID, r.IfName); err != nil {
				stepErrs = append(stepErrs, err)
			}
		}
		errs = append(errs, stepErrs...)
	}
	if c.Delegate != "" {
		if err := invoke.DelegateGC(context.Background(), c.Delegate, args.StdinData, nil); err != nil {
			errs = append(errs, fmt.Errorf("ipam plugin %s gc: %w", c.Delegate, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return asCNIErr("gc", err)
	}
	return nil
}

// claimedByLive reports whether an attachment that GC keeps (listed as
// valid, or of another network) uses the same host veth as the stale record r:
// successive sandboxes of one pod share a host veth name.
func claimedByLive(recs []*state.Workload, keep map[ipam.Attachment]bool, network string, r *state.Workload) bool {
	for _, o := range recs {
		live := o.Network != network || keep[ipam.Attachment{ContainerID: o.ContainerID, IfName: o.IfName}]
		if o != r && o.HostIface == r.HostIface && live {
			return true
		}
	}
	return false
}
