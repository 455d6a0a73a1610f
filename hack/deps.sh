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
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "routelet: missing packages ${need[*]}; run as root or: apt-get install -y ${need[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
echo "routelet: installed ${need[*]}"
