#!/bin/sh
# install-cni.sh — put the routelet CNI plugin (and chained plugins) and its
# conflist into place.
#
# This is what the Kubernetes DaemonSet's initContainer runs; on a standalone
# host run it once as root after `make build`. Each file is written to a temp
# name in the target directory, flushed to disk (fsync), checked and only then
# renamed over the old one, so a runtime running ADD at that moment executes
# either the old binary or the new one, never part of one; a binary that is
# being executed is replaced the same way (the running process keeps the old
# file). A plugin binary must answer CNI_COMMAND=VERSION before it replaces
# anything. Target directories must exist and be writable (--mkdir creates
# them); otherwise the script says which one and exits 1 without touching
# anything.
#
# Usage (--name=value works too): install-cni.sh [--bin-dir DIR] [--conf-dir DIR] [--plugin FILE]...
#                       [--conflist FILE | --no-conflist] [--force] [--mkdir]
#   --bin-dir     where CNI plugins live      (default /opt/cni/bin)
#   --conf-dir    where conflists live        (default /etc/cni/net.d)
#   --plugin      a plugin binary to install under its own name; repeatable
#                 (default bin/routelet)
#   --conflist    the conflist to install     (default conf/10-routelet.conflist)
#   --no-conflist install binaries only (routeletd --cni-conf-dir writes the
#                 conflist itself once it is ready)
#   --force       replace an existing conflist that differs (default: keep the
#                 operator's edited copy and say so)
#   --mkdir       create missing target directories
set -euf

bin_dir=/opt/cni/bin
conf_dir=/etc/cni/net.d
plugins=
conflist=conf/10-routelet.conflist
force=0
mkdirs=0

die() {
	echo "install-cni: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--*=*)
		# --name=value is --name value.
		n=${1%%=*} v=${1#*=}
		shift
		set -- "$n" "$v" "$@"
		continue ;;
	esac
	case "$1" in
	--bin-dir | --conf-dir | --plugin | --conflist)
		[ $# -ge 2 ] || { echo "install-cni: $1 needs a value" >&2; exit 2; }
		case "$1" in
		--bin-dir) bin_dir=$2 ;;
		--conf-dir) conf_dir=$2 ;;
		--plugin) plugins="$plugins
$2" ;;
		--conflist) conflist=$2 ;;
		esac
		shift 2 ;;
	--no-conflist) conflist=; shift ;;
	--force) force=1; shift ;;
	--mkdir) mkdirs=1; shift ;;
	*) echo "install-cni: unknown argument \"$1\"" >&2; exit 2 ;;
	esac
done
[ -n "$plugins" ] || plugins=bin/routelet

# Plugin paths are one per line; none may contain a newline.
old_ifs=$IFS
IFS='
'
for p in $plugins; do
	[ -f "$p" ] || die "plugin binary \"$p\" not found (run make build)"
done
IFS=$old_ifs
[ -z "$conflist" ] || [ -f "$conflist" ] || die "conflist \"$conflist\" not found"

# check_dir DIR WHAT: DIR exists (or is created with --mkdir) and is writable.
check_dir() {
	if [ ! -d "$1" ]; then
		if [ -e "$1" ]; then
			die "$2 \"$1\" is not a directory"
		fi
		[ "$mkdirs" -eq 1 ] || die "$2 \"$1\" does not exist (mount the host's directory there, or pass --mkdir)"
		mkdir -p "$1" || die "cannot create $2 \"$1\""
	fi
	# access(2) answers EROFS for root on a read-only mount.
	[ -w "$1" ] || die "$2 \"$1\" is not writable (read-only file system or mount?)"
}

check_dir "$bin_dir" "CNI bin dir"
[ -z "$conflist" ] || check_dir "$conf_dir" "CNI conf dir"

tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# atomic_install SRC DIR NAME MODE VERIFY: copy SRC to a temp file in DIR,
# fsync it, run the check when VERIFY is 1, rename it to DIR/NAME and fsync
# DIR, so that after a crash DIR/NAME is the old file or the whole new one.
atomic_install() {
	tmp=$(mktemp "$2/.$3.XXXXXX" 2>/dev/null) || die "cannot create a file in \"$2\" (read-only or full?)"
	cp "$1" "$tmp" || die "copy \"$1\" to \"$2\" failed (disk full?); \"$2/$3\" left as it was"
	chmod "$4" "$tmp"
	sync "$tmp" || die "flush \"$tmp\" to disk failed; \"$2/$3\" left as it was"
	if [ "$5" -eq 1 ]; then
		out=$(CNI_COMMAND=VERSION "$tmp" </dev/null 2>&1) || die "\"$1\" does not run (CNI_COMMAND=VERSION failed: $out); \"$2/$3\" left as it was"
		case "$out" in
		*'"supportedVersions"'*) ;;
		*) die "\"$1\" is not a CNI plugin (CNI_COMMAND=VERSION printed: $out); \"$2/$3\" left as it was" ;;
		esac
	fi
	mv -f "$tmp" "$2/$3" || die "rename into \"$2/$3\" failed"
	tmp=
	sync "$2" || die "flush directory \"$2\" failed"
}

IFS='
'
for p in $plugins; do
	IFS=$old_ifs
	name=$(basename "$p")
	atomic_install "$p" "$bin_dir" "$name" 0755 1
	echo "install-cni: installed $bin_dir/$name"
done
IFS=$old_ifs

[ -n "$conflist" ] || exit 0
name=$(basename "$conflist")
if [ -f "$conf_dir/$name" ] && ! cmp -s "$conflist" "$conf_dir/$name" && [ "$force" -eq 0 ]; then
	echo "install-cni: kept existing $conf_dir/$name (differs from $conflist; --force replaces it)"
else
	atomic_install "$conflist" "$conf_dir" "$name" 0644 0
	echo "install-cni: installed $conf_dir/$name"
fi
