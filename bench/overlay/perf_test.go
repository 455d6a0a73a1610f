package main

import (
	"math"
	"testing"
)

// TestParseHookShares: samples of other commands are not counted; a
// sample under nf_hook_slow is placed at the hook its caller runs, and
// under the xtables match it was in.
func TestParseHookShares(t *testing.T) {
	script := "cc1 \n\tffffffff81000001 nf_hook_slow\n\tffffffff81000002 ip_forward\n\n" +
		"iperf3 \n\tffffffff81000003 fib6_node_lookup_1\n\tffffffff81000004 rpfilter_mt\n\tffffffff81000005 nft_match_eval\n" +
		"\tffffffff81000006 nft_do_chain\n\tffffffff81000001 nf_hook_slow\n\tffffffff81000007 ipv6_rcv\n\n" +
		"ksoftirqd/1 \n\tffffffff81000001 nf_hook_slow\n\tffffffff81000008 ip_forward\n\n" +
		"iperf3 \n\tffffffff81000001 nf_hook_slow\n\tffffffff81000009 br_nf_pre_routing\n\n" +
		"iperf3 \n\tffffffff8100000a _copy_to_iter\n"
	h := parseHookShares(script)
	if h.samples != 4 {
		t.Fatalf("samples = %d, want 4 (iperf3 and ksoftirqd only)", h.samples)
	}
	for site, want := range map[string]float64{sitePrerouting: 0.25, siteForward: 0.25, siteBridge: 0.25, siteInput: 0} {
		if got := h.site[site]; math.Abs(got-want) > 1e-9 {
			t.Errorf("site %s = %v, want %v", site, got, want)
		}
	}
	if got := h.match["rpfilter_mt"]; math.Abs(got-0.25) > 1e-9 {
		t.Errorf("match rpfilter_mt = %v, want 0.25", got)
	}
	if got := h.own(); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("own = %v, want 0.5 (the bridge's share is not routelet's)", got)
	}
}
