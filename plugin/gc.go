package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// cmdGC removes every attachment of this network (record.Network equals the
// config's name) that is not in cni.dev/valid-attachments (or the older
// cni.dev/attachments): its host veth (only a veth with the prefix, see
// removeLink), its addresses and its record. Attachments of other networks
// sharing the state directory are never touched. With a delegated IPAM
// plugin, that plugin's GC runs as well. A config without any keep list
// removes nothing: only an explicit list, even an empty one, says what is
// garbage.
func cmdGC(args *skel.CmdArgs) error {
	defer waitGuardCloses()
	c, e := loadConfig(args.StdinData)
	if e != nil {
		return e
	}
	if !c.KeepListGiven {
		slog.Warn("GC: the config has no cni.dev/valid-attachments (nor cni.dev/attachments); removing nothing", "network", c.Name)
		return nil
	}
	keep := map[ipam.Attachment]bool{}
	for _, lists := range [][]types.GCAttachment{c.raw.ValidAttachments, c.raw.LegacyAttachments} {
		for _, a := range lists {
			keep[ipam.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
		}
	}
	store, host, e := openForRemoval(c)
	if e != nil {
		return e
	}
	recs, bad := store.ListWorkloads()
	for _, b := range bad {
		slog.Warn("skipping unreadable workload record", "err", b)
	}
	var alloc *ipam.Allocator
	var err error
	var errs []error
	for _, r := range recs {
		att := ipam.Attachment{ContainerID: r.ContainerID, IfName: r.IfName}
		if r.Network != c.Name || keep[att] {
			continue
		}
		slog.Info("collecting stale attachment", "container", r.ContainerID, "ifname", r.IfName, "iface", r.HostIface)
		var lk *vethLock
		if r.HostIface != "" {
			if lk, err = lockVeth(c.StateDir, r.HostIface, "GC", r.ContainerID+"/"+r.IfName, vethLockWait); err != nil {
				errs = append(errs, fmt.Errorf("collect %s/%s: %w", r.ContainerID, r.IfName, err))
				continue
			}
		}
		var stepErrs []error
		if r.HostIface != "" && !claimedByLive(recs, keep, c.Name, r) {
			if err := removeLink(host, c.Prefix, r.HostIface, r.ContainerID, r.IfName); err != nil {
				stepErrs = append(stepErrs, err)
			}
		}
		if c.Delegate == "" {
			if alloc == nil {
				if alloc, err = openAllocator(c, store); err != nil {
					if lk != nil {
						lk.release()
					}
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
		if lk != nil {
			lk.release()
		}
		errs = append(errs, stepErrs...)
	}
	if c.Delegate == "" && len(bad) == 0 {
		if alloc == nil {
			if alloc, err = openAllocator(c, store); err != nil {
				return asCNIErr("gc", err)
			}
		}
		errs = append(errs, releaseOrphans(alloc, recs, keep)...)
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

// orphanGrace is how old an allocation without any workload record must be
// before GC releases it: longer than any runtime lets an ADD run, so an ADD
// between its allocation and its record is never mistaken for a leak.
const orphanGrace = 10 * time.Minute

// releaseOrphans releases built-in IPAM allocations that no workload record
// of any network describes, that are not listed as valid, and that are older
// than orphanGrace: what an ADD killed between IPAM and its record (a runtime
// timeout) leaves behind. Every finished ADD of any network sharing the state
// directory has a record, so this never touches a live attachment; the
// caller skips it when some record is unreadable, since an unreadable record
// could be a live attachment's.
func releaseOrphans(alloc *ipam.Allocator, recs []*state.Workload, keep map[ipam.Attachment]bool) []error {
	ctx := context.Background()
	held, err := alloc.List(ctx)
	if err != nil {
		return []error{fmt.Errorf("list allocations: %w", err)}
	}
	described := map[ipam.Attachment]bool{}
	for _, r := range recs {
		described[ipam.Attachment{ContainerID: r.ContainerID, IfName: r.IfName}] = true
	}
	var errs []error
	for att, allocs := range held {
		if keep[att] || described[att] {
			continue
		}
		written, found, err := alloc.RecordTime(att)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found || time.Since(written) < orphanGrace {
			continue
		}
		slog.Info("releasing orphaned allocation (no workload record)", "container", att.ContainerID, "ifname", att.IfName, "allocations", fmt.Sprint(allocs), "age", time.Since(written).Round(time.Second))
		if err := alloc.Release(ctx, att); err != nil {
			errs = append(errs, fmt.Errorf("release orphaned %s/%s: %w", att.ContainerID, att.IfName, err))
		}
	}
	return errs
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
