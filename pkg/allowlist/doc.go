// Package allowlist ties routelet's ipsets (package ipset) and iptables
// chains (package firewall) together into the one object the daemon drives:
// it says who may send overlay traffic (peers), which CIDRs are pods
// (pools) and which features are on (Config), and keeps the kernel in line
// for IPv4 and, when enabled, IPv6.
//
// Setters touch memory only. [Manager.Apply] reconciles in the order the
// kernel requires: sets that rules use are created or updated first, then
// the chains, and only then are sets no rule uses any more destroyed (the
// kernel refuses to destroy a set a rule references). [Manager.Check] is the
// tamper check and full resync: it re-reads every set and chain and repairs
// drift. [Cleanup] removes everything routelet put there.
package allowlist
