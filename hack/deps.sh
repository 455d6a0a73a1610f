#!/usr/bin/env bash
# Installs the Debian packages routelet's demo and tests use, when missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

need=()
command -v ip        >/dev/null 2>&1 || need+=(iproute2)
command -v iptables  >/dev/null 2>&1 || need+=(iptables)
command -v ping      >/dev/null 2>&1 || need+=(iputils-ping)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v iperf3    >/dev/null 2>&1 || need+=(iperf3)
command -v ipset     >/dev/null 2>&1 || need+=(ipset)
command -v nft       >/dev/null 2>&1 || need+=(nftables)
# The BGP tests run BIRD 2 by these paths (internal/birdtest), which are
# outside an ordinary user's PATH.
{ [ -x /usr/sbin/bird ] && [ -x /usr/sbin/birdc ]; } || need+=(bird2)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "routelet: missing packages ${need[*]}; run as root or: apt-get install -y ${need[*]}" >&2
	exit 1
fi

# bird2's maintainer scripts start a bird daemon in this, the host's,
# network namespace unless the policy layer says no: the tests start their
# own, only inside namespaces they made. An existing policy-rc.d that
# already refuses (exit 101) is left alone; one that does not is moved
# aside for the install and put back as it was; without one, a refusing
# one is written for the install and removed afterwards.
policy=/usr/sbin/policy-rc.d
saved="$policy.routelet-saved"
ours=false  # $policy is the one written here
moved=false # the one that was there is at $saved
restore_policy() {
	if $moved; then
		mv -f "$saved" "$policy"
	elif $ours; then
		rm -f "$policy"
	fi
}
trap restore_policy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ -e "$policy" ] || [ -L "$policy" ]; then
	rc=0
	"$policy" bird start >/dev/null 2>&1 || rc=$?
	if [ "$rc" -ne 101 ]; then
		if [ -e "$saved" ] || [ -L "$saved" ]; then
			echo "routelet: $saved exists (left by an interrupted run?); restore it to $policy first" >&2
			exit 1
		fi
		mv "$policy" "$saved"
		moved=true
		ours=true
	fi
else
	ours=true
fi
if $ours; then
	printf '#!/bin/sh\n# Written by routelet'"'"'s hack/deps.sh for one apt-get install: start no services.\nexit 101\n' >"$policy"
	chmod 755 "$policy"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
echo "routelet: installed ${need[*]}"
