package main

import (
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routelet/routelet/pkg/podnet"
)

// Indexes of the two interfaces in every result routelet returns.
const (
	hostIfaceIndex = 0
	contIfaceIndex = 1
)

// buildResult describes an attachment in the current result format: the host
// veth, the container interface (with its sandbox), one host-sized IP per
// address pointing at the container interface with the pod gateway, a default
// route per family and the DNS settings. Callers convert it to the requested
// version when printing.
func buildResult(att *podnet.Attached, addrs []netip.Addr, dns types.DNS) *types100.Result {
	r := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{
			hostIfaceIndex: {Name: att.HostIface, Mac: att.HostMAC.String()},
			contIfaceIndex: {Name: att.ContIface, Mac: att.ContMAC.String(), Sandbox: att.NetnsPath},
		},
		DNS: dns,
	}
	var has4, has6 bool
	for _, a := range addrs {
		gw := podnet.GatewayV4
		if a.Is6() {
			gw = podnet.GatewayV6
			has6 = true
		} else {
			has4 = true
		}
		r.IPs = append(r.IPs, &types100.IPConfig{
			Interface: types100.Int(contIfaceIndex),
			Address:   net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())},
			Gateway:   gw.AsSlice(),
		})
	}
	if has4 {
		r.Routes = append(r.Routes, &types.Route{
			Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			GW:  podnet.GatewayV4.AsSlice(),
		})
	}
	if has6 {
		r.Routes = append(r.Routes, &types.Route{
			Dst: net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
			GW:  podnet.GatewayV6.AsSlice(),
		})
	}
	return r
}
