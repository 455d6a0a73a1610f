package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Netfilter hook sites, as hookShares names them.
const (
	sitePrerouting = "PREROUTING"
	siteInput      = "INPUT"
	siteForward    = "FORWARD"
	siteOutput     = "OUTPUT/POSTROUTING"
	siteBridge     = "bridge" // br_netfilter on the router's bridge: both paths cross it
	siteOther      = "other"
)

// hookCallers maps the kernel function that calls into netfilter to the
// hook it runs, by name prefix; the first match walking up the stack wins.
var hookCallers = []struct{ prefix, site string }{
	{"br_", siteBridge},
	{"ip_rcv", sitePrerouting}, {"ipv6_rcv", sitePrerouting}, {"ip_list_rcv", sitePrerouting},
	{"ipv6_list_rcv", sitePrerouting}, {"ip_sublist_rcv", sitePrerouting}, {"ip6_sublist_rcv", sitePrerouting},
	{"ip_local_deliver", siteInput}, {"ip6_input", siteInput},
	{"ip_forward", siteForward}, {"ip6_forward", siteForward},
	{"ip_output", siteOutput}, {"ip6_output", siteOutput}, {"ip_local_out", siteOutput},
	{"__ip_local_out", siteOutput}, {"ip6_local_out", siteOutput}, {"__ip6_local_out", siteOutput},
}

// hookShares are the shares of a transfer's samples spent in netfilter,
// per hook site and per xtables match.
type hookShares struct {
	samples int                // samples of the transfer's own threads
	site    map[string]float64 // fraction of samples under nf_hook_slow, per site
	match   map[string]float64 // fraction under an xtables match function
}

// own is the share of the sites where routelet's rules run (all but the
// router's bridge).
func (h hookShares) own() float64 {
	return h.site[sitePrerouting] + h.site[siteInput] + h.site[siteForward] + h.site[siteOutput] + h.site[siteOther]
}

// String lists the sites routelet's rules run at, their sum, then the
// bridge's share and the matches.
func (h hookShares) String() string {
	s := fmt.Sprintf("netfilter %.1f%% of %d samples (PREROUTING %.1f, INPUT %.1f, FORWARD %.1f, OUTPUT/POSTROUTING %.1f, other %.1f; router bridge %.1f)",
		100*h.own(), h.samples, 100*h.site[sitePrerouting], 100*h.site[siteInput], 100*h.site[siteForward], 100*h.site[siteOutput], 100*h.site[siteOther], 100*h.site[siteBridge])
	var ms []string
	for m, f := range h.match {
		ms = append(ms, fmt.Sprintf("%s %.1f", m, 100*f))
	}
	slices.Sort(ms)
	if len(ms) > 0 {
		s += "; matches: " + strings.Join(ms, ", ")
	}
	return s
}

// perfHookShares runs perf script on file and returns hookShares over the
// samples of the iperf3 processes and the ksoftirqd threads: the work the
// attributable figure counts.
func perfHookShares(ctx context.Context, file string) (hookShares, error) {
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", file, "-F", "comm,ip,sym").Output()
	if err != nil {
		return hookShares{}, fmt.Errorf("perf script -i %s: %w", file, err)
	}
	return parseHookShares(string(out)), nil
}

// parseHookShares reads `perf script -F comm,ip,sym` output: per sample a
// line with the command, then one line per frame, innermost first, and a
// blank line.
func parseHookShares(script string) hookShares {
	h := hookShares{site: map[string]float64{}, match: map[string]float64{}}
	var comm string
	var stack []string
	flush := func() {
		defer func() { comm, stack = "", nil }()
		if !strings.HasPrefix(comm, "iperf3") && !strings.HasPrefix(comm, "ksoftirqd/") {
			return
		}
		h.samples++
		i := slices.IndexFunc(stack, func(f string) bool { return strings.HasPrefix(f, "nf_hook_slow") })
		if i < 0 {
			return
		}
		site := siteOther
	callers:
		for _, f := range stack[i+1 : min(i+4, len(stack))] {
			for _, c := range hookCallers {
				if strings.HasPrefix(f, c.prefix) {
					site = c.site
					break callers
				}
			}
		}
		h.site[site]++
		for _, f := range stack[:i] {
			if strings.HasSuffix(f, "_mt") || strings.HasSuffix(f, "_mt6") || strings.Contains(f, "_mt_v") || strings.HasPrefix(f, "set_match_v") || f == "match_type6" {
				h.match[f]++
				break
			}
		}
	}
	s := bufio.NewScanner(strings.NewReader(script))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != ' ' && line[0] != '\t':
			flush()
			comm = strings.TrimSpace(line)
		default:
			if f := strings.Fields(line); len(f) >= 2 {
				stack = append(stack, f[1])
			}
		}
	}
	flush()
	if h.samples > 0 {
		for k := range h.site {
			h.site[k] /= float64(h.samples)
		}
		for k := range h.match {
			h.match[k] /= float64(h.samples)
		}
	}
	return h
}
