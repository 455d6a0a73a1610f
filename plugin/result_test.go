package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/podnet"
)

func testAttached() *podnet.Attached {
	mac, _ := net.ParseMAC("0a:58:0a:01:00:05")
	return &podnet.Attached{
		HostIface: "cali0123456789a", HostMAC: podnet.HostMAC,
		ContIface: "eth0", ContMAC: mac, NetnsPath: "/var/run/netns/pod",
	}
}

// TestResultPerVersion prints the result as each supported spec version and
// checks what a runtime reads: the version, both interfaces, addresses
// pointing at the container interface, the gateway routes and DNS.
func TestResultPerVersion(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5")}
	res := buildResult(testAttached(), addrs, types.DNS{Nameservers: []string{"10.96.0.10"}})
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			conv, err := res.GetAsVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := conv.PrintTo(&buf); err != nil {
				t.Fatal(err)
			}
			var got struct {
				CNIVersion string `json:"cniVersion"`
				Interfaces []struct {
					Name, Mac, Sandbox string
				}
				IPs []struct {
					Version   string `json:"version"`
					Address   string
					Gateway   string
					Interface *int
				}
				Routes []struct{ Dst, GW string }
				DNS    struct{ Nameservers []string }
			}
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%v\n%s", err, buf.String())
			}
			if got.CNIVersion != v {
				t.Errorf("cniVersion = %q, want %q", got.CNIVersion, v)
			}
			if len(got.Interfaces) != 2 || got.Interfaces[0].Name != "cali0123456789a" || got.Interfaces[0].Mac != "ee:ee:ee:ee:ee:ee" ||
				got.Interfaces[0].Sandbox != "" || got.Interfaces[1].Name != "eth0" || got.Interfaces[1].Sandbox != "/var/run/netns/pod" ||
				got.Interfaces[1].Mac != "0a:58:0a:01:00:05" {
				t.Errorf("interfaces = %+v", got.Interfaces)
			}
			wantIPs := []struct{ addr, gw, ver string }{{"10.1.0.5/32", "169.254.1.1", "4"}, {"fd00:1::5/128", "fe80::ecee:eeff:feee:eeee", "6"}}
			if len(got.IPs) != len(wantIPs) {
				t.Fatalf("ips = %+v", got.IPs)
			}
			for i, w := range wantIPs {
				ip := got.IPs[i]
				if ip.Address != w.addr || ip.Gateway != w.gw || ip.Interface == nil || *ip.Interface != 1 {
					t.Errorf("ips[%d] = %+v, want %s gw %s on interface 1", i, ip, w.addr, w.gw)
				}
				if hasVersion := v == "0.3.1" || v == "0.4.0"; hasVersion && ip.Version != w.ver {
					t.Errorf("ips[%d].version = %q, want %q for %s", i, ip.Version, w.ver, v)
				}
			}
			if len(got.Routes) != 2 || got.Routes[0].Dst != "0.0.0.0/0" || got.Routes[0].GW != "169.254.1.1" ||
				got.Routes[1].Dst != "::/0" || got.Routes[1].GW != "fe80::ecee:eeff:feee:eeee" {
				t.Errorf("routes = %+v", got.Routes)
			}
			if len(got.DNS.Nameservers) != 1 || got.DNS.Nameservers[0] != "10.96.0.10" {
				t.Errorf("dns = %+v", got.DNS)
			}
		})
	}
}

func TestResultV4Only(t *testing.T) {
	res := buildResult(testAttached(), []netip.Addr{netip.MustParseAddr("10.1.0.5")}, types.DNS{})
	if len(res.IPs) != 1 || len(res.Routes) != 1 || res.Routes[0].GW.String() != "169.254.1.1" {
		t.Errorf("v4-only result: ips=%v routes=%v", res.IPs, res.Routes)
	}
}
