package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// cmdDel removes an attachment: the host veth (taking the pod side and the
// host routes with it), the address allocation and the workload record. Every
// piece may already be gone; DEL then succeeds. The steps are independent, so
// all are tried and their errors joined; the record goes last so routeletd
// keeps seeing the attachment until nothing else is left. An interfacePrefix
// that matches the uplink or a non-veth link is refused before anything is
// touched, and DEL holds the host veth name's lock, waiting for an ADD of
// the same name to finish.
func cmdDel(args *skel.CmdArgs) error {
	defer waitGuardCloses()
	c, ka, e := loadCall(args)
	if e != nil {
		return e
	}
	store, e := c.openStore()
	if e != nil {
		return e
	}
	// The node's links are read for the interfacePrefix check while the
	// record is read, the veth name locked and the records naming it
	// scanned: all reads, or undone when the check refuses (the lock).
	// Nothing is deleted before the check has passed.
	type hostRead struct {
		host nodespace.Host
		e    *types.Error
	}
	read := make(chan hostRead, 1)
	go func() {
		host, e := guardedHost(c, routes.DefaultProtocol, daemonDevices(daemonStatus(store)))
		read <- hostRead{host, e}
	}()
	rec, err := store.GetWorkload(args.ContainerID, args.IfName)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			slog.Warn("workload record unreadable; deleting by computed names", "container", args.ContainerID, "ifname", args.IfName, "err", err)
		}
		rec = nil
	}
	hostIf := hostIfaceName(c, ka, args.ContainerID, args.IfName)
	if rec != nil && rec.HostIface != "" {
		hostIf = rec.HostIface
	}
	lk, err := lockVeth(c.StateDir, hostIf, "DEL", args.ContainerID+"/"+args.IfName, vethLockWait)
	if err != nil {
		if hr := <-read; hr.e != nil {
			return hr.e
		}
		return lockErr(err, hostIf)
	}
	owner := claimedBy(store, hostIf, args.ContainerID, args.IfName)
	hr := <-read
	if hr.e != nil {
		lk.release()
		return hr.e
	}

	var errs []error
	if err := deleteHostVeth(owner, hr.host, c.Prefix, hostIf, args.ContainerID, args.IfName); err != nil {
		errs = append(errs, err)
	}
	if err := releaseAddrs(c, store, args.StdinData, ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := store.DeleteWorkload(args.ContainerID, args.IfName); err != nil {
			errs = append(errs, fmt.Errorf("delete workload record: %w", err))
		}
	}
	lk.release()
	if err := errors.Join(errs...); err != nil {
		return asCNIErr("del", err)
	}
	return nil
}

// openForRemoval is the start of GC: the state directory opened
// and the node's links read, the interfacePrefix checked against them.
func openForRemoval(c *config) (*state.Store, nodespace.Host, *types.Error) {
	store, e := c.openStore()
	if e != nil {
		return nil, nodespace.Host{}, e
	}
	host, e := guardedHost(c, routes.DefaultProtocol, daemonDevices(daemonStatus(store)))
	if e != nil {
		return nil, nodespace.Host{}, e
	}
	return store, host, nil
}

// deleteHostVeth deletes hostIf unless owner, another attachment's record
// naming it (claimedBy), claims it or it is not routelet's to delete (see
// removeLink). Host names derived
// from the pod name are used by successive sandboxes of one pod: when a new
// sandbox's ADD already replaced the veth, the old sandbox's DEL must leave
// the new veth alone. Names derived from the container ID are checked too:
// with a long interfacePrefix few hash digits remain, and the DEL after an
// ADD refused for a name clash must not delete the other attachment's veth.
func deleteHostVeth(owner *state.Workload, host nodespace.Host, prefix, hostIf, containerID, ifName string) error {
	if owner != nil {
		slog.Info("host veth belongs to another attachment; leaving it", "iface", hostIf, "owner", owner.ContainerID)
		return nil
	}
	return removeLink(host, prefix, hostIf, containerID, ifName)
}

// removeLink deletes the link a workload record names only when it is a
// veth with the configured prefix and not the uplink, and its pod guard
// (on kernels that keep a netdev chain without its device) as soon as the
// kernel has taken the veth off the node, while the deletion still waits
// for its grace periods (podnet.TeardownThen: a carrier process waits for
// them, DEL does not), or at once when there is no such link. Anything else (a tampered record naming a
// bridge, the uplink, an overlay device, a veth under another prefix) is
// left alone with a warning, and so is its guard: the address and the
// record are still released, so DEL and GC converge.
func removeLink(host nodespace.Host, prefix, hostIf, containerID, ifName string) error {
	hv, err := dp.HostLink(hostIf)
	if err != nil {
		return fmt.Errorf("look up host veth %s: %w", hostIf, err)
	}
	if !hv.Exists {
		return removeGuard(hostIf)
	}
	if why := ownerDescription(host, nodespace.Link{Name: hostIf, Type: hv.Type}, prefix); why != "" {
		slog.Warn("not deleting a link routelet does not own; releasing the attachment's address and record only",
			"iface", hostIf, "reason", why, "container", containerID, "ifname", ifName)
		return nil
	}
	vethErr, guardErr := dp.Unplug(hostIf)
	if vethErr != nil {
		vethErr = fmt.Errorf("delete host veth: %w", vethErr)
	}
	if guardErr != nil {
		guardErr = fmt.Errorf("remove pod source check: %w", guardErr)
	}
	return errors.Join(vethErr, guardErr)
}

// removeGuard deletes the pod guard of hostIf, whose veth is gone.
func removeGuard(hostIf string) error {
	if err := dp.RemoveGuard(hostIf); err != nil {
		return fmt.Errorf("remove pod source check: %w", err)
	}
	return nil
}

// claimedBy returns the record of another attachment using hostIf, or nil.
func claimedBy(store *state.Store, hostIf, containerID, ifName string) *state.Workload {
	for _, r := range store.WorkloadsWithHostIface(hostIf) {
		if r.ContainerID != containerID || r.IfName != ifName {
			return r
		}
	}
	return nil
}

// releaseAddrs frees the attachment's addresses in the built-in IPAM, or runs
// the delegated IPAM plugin's DEL.
func releaseAddrs(c *config, store *state.Store, stdin []byte, att ipam.Attachment) error {
	if c.Delegate != "" {
		if err := delegated.ExecDel(c.Delegate, stdin); err != nil {
			return fmt.Errorf("ipam plugin %s: %w", c.Delegate, err)
		}
		return nil
	}
	alloc, err := openAllocator(c, store)
	if err != nil {
		return err
	}
	if err := alloc.Release(context.Background(), att); err != nil {
		return ipamErr(fmt.Sprintf("release addresses of %s/%s", att.ContainerID, att.IfName), err)
	}
	return nil
}

// openAllocator opens the built-in IPAM for release and inspection, with the
// blocks currently known (conflist, else daemon.json, else none): a DEL must
// work even after the blocks have gone away. daemon.json blocks the IPAM
// would refuse (host bits, IPv4-mapped, too small, overlapping) are skipped
// with a warning: release does not need them, and DEL must not fail over a
// block it never allocates from.
func openAllocator(c *config, store *state.Store) (*ipam.Allocator, error) {
	blocks := c.Blocks
	if len(blocks) == 0 {
		if st, err := store.ReadDaemonStatus(); err == nil {
		next:
			for _, s := range st.Blocks {
				p, err := parseBlock(s)
				if err != nil {
					slog.Warn("ignoring unusable block in daemon status", "cidr", s, "err", err)
					continue
				}
				for _, q := range blocks {
					if q.Overlaps(p) {
						slog.Warn("ignoring overlapping block in daemon status", "cidr", s, "overlaps", q.String())
						continue next
					}
				}
				blocks = append(blocks, p)
			}
		}
	}
	alloc, err := ipam.New(filepath.Join(c.StateDir, "ipam"), blocks, ipam.Options{})
	if err != nil {
		return nil, fmt.Errorf("open ipam in %s: %w", c.StateDir, err)
	}
	return alloc, nil
}
