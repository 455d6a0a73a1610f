#!/bin/sh
# install-cni.sh — put the routelet CNI plugin and its conflist into place.
#
# This is what the Kubernetes DaemonSet's initContainer runs; on a standalone
# host run it once as root after `make build`. Both copies are atomic (write
# to a temp file in the target directory, then rename), so a kubelet or
# containerd reading the directories never sees a half-written file.
#
# Usage: install-cni.sh [--bin-dir DIR] [--conf-dir DIR] [--plugin FILE]
#                       [--conflist FILE] [--force]
#   --bin-dir   where CNI plugins live      (default /opt/cni/bin)
#   --conf-dir  where conflists live        (default /etc/cni/net.d)
#   --plugin    the routelet binary to copy (default bin/routelet)
#   --conflist  the conflist to install     (default conf/10-routelet.conflist)
#   --force     replace an existing conflist that differs (default: keep the
#               operator's edited copy and say so)
set -eu

bin_dir=/opt/cni/bin
conf_dir=/etc/cni/net.d
plugin=bin/routelet
conflist=conf/10-routelet.conflist
force=0

while [ $# -gt 0 ]; do
	case "$1" in
	--bin-dir) bin_dir=$2; shift 2 ;;
	--conf-dir) conf_dir=$2; shift 2 ;;
	--plugin) plugin=$2; shift 2 ;;
	--conflist) conflist=$2; shift 2 ;;
	--force) force=1; shift ;;
	*) echo "install-cni: unknown argument \"$1\"" >&2; exit 2 ;;
	esac
done

[ -f "$plugin" ] || { echo "install-cni: plugin binary \"$plugin\" not found (run make build)" >&2; exit 1; }
[ -f "$conflist" ] || { echo "install-cni: conflist \"$conflist\" not found" >&2; exit 1; }

# atomic_copy SRC DIR NAME MODE: copy SRC to DIR/NAME through a temp file.
atomic_copy() {
	tmp=$(mktemp "$2/.$3.XXXXXX")
	cp "$1" "$tmp"
	chmod "$4" "$tmp"
	mv -f "$tmp" "$2/$3"
}

mkdir -p "$bin_dir" "$conf_dir"
atomic_copy "$plugin" "$bin_dir" routelet 0755
echo "install-cni: installed $bin_dir/routelet"

name=$(basename "$conflist")
if [ -f "$conf_dir/$name" ] && ! cmp -s "$conflist" "$conf_dir/$name" && [ "$force" -eq 0 ]; then
	echo "install-cni: kept existing $conf_dir/$name (differs from $conflist; --force replaces it)"
else
	atomic_copy "$conflist" "$conf_dir" "$name" 0644
	echo "install-cni: installed $conf_dir/$name"
fi
