#!/usr/bin/env bash
# Runs routelet's privileged tests on Debian's stock kernel under qemu.
#
#   hack/vmtest/vmtest.sh          the stock-kernel lane (hack/vmtest/lane: IPIP
#                                  and the tests of netlink event semantics):
#                                  fails when a test fails or any test of the
#                                  lane skips
#   hack/vmtest/vmtest.sh --all    every package's tests (hack/vmtest/all)
#
# On the host: installs qemu-system-x86, busybox-static, cpio and kmod when
# missing; fetches the kernel package linux-image-amd64 depends on without
# installing it (apt-get download, dpkg-deb -x, depmod -b) into
# $VMTEST_CACHE; builds the test binaries and routelet's binaries with the
# host's go; writes a small initramfs (static busybox, the 9p and virtio
# modules, hack/vmtest/init). The VM sees the host's /usr and /etc, the
# unpacked kernel tree, the binaries and this checkout as read-only 9p
# shares; everything it writes is in its own memory. It has no network.
# hack/vmtest/guest.sh runs the tests inside; their -v output streams back
# on the second serial port and the exit status is the suites'.
#
# Environment: VMTEST_CACHE (default /var/cache/routelet-vmtest),
# VMTEST_KERNEL_PKG (default: what linux-image-amd64 depends on),
# VMTEST_ACCEL (kvm or tcg; default kvm when it works), VMTEST_MEM (MiB),
# VMTEST_CPUS, VMTEST_TIMEOUT (seconds for the whole VM run), VMTEST_PLAN (a
# file of "package pattern" lines to run instead of the mode's plan, e.g.
# "./plugin ^TestAdd").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
cache=${VMTEST_CACHE:-/var/cache/routelet-vmtest}
mode=lane
case "${1:-}" in
--all) mode=all ;;
"") ;;
*) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
if [ "$mode" = all ]; then
	timeout_s=${VMTEST_TIMEOUT:-5400}
	mem=${VMTEST_MEM:-3072}
else
	timeout_s=${VMTEST_TIMEOUT:-900}
	mem=${VMTEST_MEM:-2048}
fi
cpus=${VMTEST_CPUS:-$(nproc)}

log() { echo "vmtest: $*" >&2; }
die() { log "$*"; exit 1; }
elapsed() { echo "$((SECONDS - $1))s"; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, the kernel cache in $cache, privileged tests in the VM)"
[ "$(uname -m)" = x86_64 ] || die "needs an x86_64 host (boots Debian's amd64 kernel)"
# The VM's root has /bin, /sbin, /lib and /lib64 as links into the shared
# /usr, as a merged-/usr Debian has them.
for d in bin sbin lib lib64; do
	[ -L "/$d" ] || [ ! -e "/$d" ] || die "/$d is not a link into /usr: the VM's userland needs a merged-/usr host"
done

apt_updated=
apt_update() {
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
}

# Packages: install only what is missing.
t0=$SECONDS
bash "$root/hack/deps.sh"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null && command -v modprobe >/dev/null || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt_update
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
busybox=/bin/busybox
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is dynamically linked; install busybox-static"
log "packages ready ($(elapsed "$t0"))"

# Kernel: the package linux-image-amd64 depends on, unpacked into the cache.
t0=$SECONDS
kpkg_of_meta() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}'
}
kpkg=${VMTEST_KERNEL_PKG:-}
if [ -z "$kpkg" ]; then
	kpkg=$(kpkg_of_meta)
	if [ -z "$kpkg" ]; then
		apt_update
		kpkg=$(kpkg_of_meta)
	fi
	[ -n "$kpkg" ] || die "cannot tell which kernel package linux-image-amd64 depends on (apt sources?)"
fi
kver=${kpkg#linux-image-}
kdir=$cache/$kpkg
if [ ! -e "$kdir/.ready" ]; then
	log "fetching $kpkg"
	rm -rf "$kdir" "$cache/download"
	mkdir -p "$cache/download"
	# _apt cannot write into a root-owned directory; download as root.
	if ! (cd "$cache/download" && apt-get download -o APT::Sandbox::User=root "$kpkg" >/dev/null); then
		apt_update
		(cd "$cache/download" && apt-get download -o APT::Sandbox::User=root "$kpkg" >/dev/null) ||
			die "apt-get download $kpkg failed"
	fi
	mkdir -p "$kdir.tmp"
	dpkg-deb -x "$cache"/download/"$kpkg"_*.deb "$kdir.tmp"
	# Debian 12 ships /lib/modules, later releases /usr/lib/modules.
	if [ ! -d "$kdir.tmp/lib/modules/$kver" ] && [ -d "$kdir.tmp/usr/lib/modules/$kver" ]; then
		mkdir -p "$kdir.tmp/lib/modules"
		mv "$kdir.tmp/usr/lib/modules/$kver" "$kdir.tmp/lib/modules/"
	fi
	depmod -b "$kdir.tmp" "$kver"
	rm -rf "$cache/download"
	mv "$kdir.tmp" "$kdir"
	touch "$kdir/.ready"
	# Older kernels in the cache are no longer what Debian ships.
	find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' ! -name "$kpkg" -exec rm -rf {} +
fi
vmlinuz=$kdir/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || die "$vmlinuz missing in the unpacked $kpkg"
log "kernel $kver ready ($(elapsed "$t0"))"

# Binaries, built on the host: the test binary of each package in the plan,
# and the binaries the tests would otherwise build (netnstest.PrebuiltEnv).
t0=$SECONDS
run=$cache/run-$mode
rm -rf "$run"
mkdir -p "$run/bin" "$run/initramfs"
plan=${VMTEST_PLAN:-$here/$mode}
cd "$root"
# -tags grpcnotrace and static: see internal/netnstest.BuildTags, goBuild.
CGO_ENABLED=0 go build -tags grpcnotrace -o "$run/bin/routelet" ./plugin
CGO_ENABLED=0 go build -tags grpcnotrace -o "$run/bin/routeletd" ./daemon
CGO_ENABLED=0 go build -tags grpcnotrace -o "$run/bin/" \
	github.com/containernetworking/plugins/plugins/main/ptp \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/meta/portmap
: >"$run/bin/plan"
while read -r pkg regex; do
	case "$pkg" in '' | '#'*) continue ;; esac
	if [ "$pkg" = ./... ]; then
		# Every package with test files, each under its own name.
		for p in $(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' ./...); do
			echo "./${p#"$root"/} ${regex:-.}" >>"$run/bin/plan"
		done
	else
		echo "$pkg ${regex:-.}" >>"$run/bin/plan"
	fi
done <"$plan"
# -tags vmtest leaves out the build inspections (//go:build !vmtest), which
# run the go tool the VM does not have.
while read -r pkg _; do
	name=$(echo "${pkg#./}" | tr / _).test
	[ -e "$run/bin/$name" ] || go test -c -tags vmtest -o "$run/bin/$name" "$pkg"
done <"$run/bin/plan"
log "binaries built ($(elapsed "$t0"))"

# Initramfs: busybox, the modules needed to mount the shares (with their
# dependencies from modules.dep), the init script and its settings.
ird=$run/initramfs
mkdir -p "$ird"/{busybox,modules,vmtest,usr,etc,proc,sys,dev,run,tmp,root,var/tmp,var/lib}
for d in bin sbin lib lib64; do
	[ -L "/$d" ] && ln -s "$(readlink "/$d")" "$ird/$d"
done
ln -s ../run "$ird/var/run"
cp "$busybox" "$ird/busybox/busybox"
cp "$here/init" "$ird/init"
chmod 0755 "$ird/init"
# modprobe -S … --show-depends prints the insmod lines in load order, a
# module once per dependency path: keep the first of each.
modprobe -d "$kdir" -S "$kver" --show-depends -a 9p 9pnet_virtio virtio_pci virtio_rng |
	awk '$1 == "insmod" && !seen[$2]++ {print $2}' |
	while read -r ko; do
		cp "$ko" "$ird/modules/"
		basename "$ko" >>"$ird/modules/order"
	done
[ -s "$ird/modules/order" ] || die "no 9p/virtio modules found in $kdir"
# The modules the tests need (hack/vmtest/modules), as this kernel has
# them: guest.sh loads these with modprobe, which takes each one's
# dependencies from modules.dep; names the kernel lacks are reported here.
missing=()
while read -r m _; do
	case "$m" in '' | '#'*) continue ;; esac
	if deps=$(modprobe -d "$kdir" -S "$kver" --show-depends "$m" 2>/dev/null); then
		echo "$deps" | grep -q '^insmod ' && echo "$m" >>"$ird/vmtest/modules"
	else
		missing+=("$m")
	fi
done <"$here/modules"
[ ${#missing[@]} -eq 0 ] || log "WARNING: $kver has no modules ${missing[*]}; the tests run without them"
cat >"$ird/vmtest/config" <<EOF
checkout=$root
mode=$mode
EOF
(cd "$ird" && find . -print0 | cpio --null -o -H newc --quiet) >"$run/initramfs.cpio"

# kvm_works boots the kernel under KVM with no root file system and
# reports whether it printed its banner within 10 s. /dev/kvm can be there,
# open and make VMs whose CPUs then never run (nested virtualisation without
# support), so nothing short of running guest code tells.
kvm_works() {
	[ -c /dev/kvm ] || return 1
	local probe=$run/kvm-probe.log pid i
	: >"$probe"
	qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -no-reboot -display none -monitor none \
		-kernel "$vmlinuz" -append "console=ttyS0 panic=-1" -serial "file:$probe" \
		</dev/null >/dev/null 2>&1 &
	pid=$!
	for i in $(seq 50); do
		grep -q "Linux version" "$probe" 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	grep -q "Linux version" "$probe"
}

# Acceleration: KVM when it runs guest code, else TCG.
accel=${VMTEST_ACCEL:-}
if [ -z "$accel" ]; then
	accel=tcg
	kvm_works && accel=kvm
fi
case "$accel" in
kvm) cpu=host ;;
tcg) cpu=max; accel=tcg,thread=multi ;;
*) die "VMTEST_ACCEL=$accel: want kvm or tcg" ;;
esac

share() { # share tag path
	echo -fsdev "local,id=$1,path=$2,security_model=none,readonly=on,multidevs=remap" \
		-device "virtio-9p-pci,fsdev=$1,mount_tag=$1"
}
out=$run/output.log
console=$run/console.log
: >"$out"
log "booting $kver ($accel, $cpus CPUs, ${mem} MiB); kernel log in $console"
t0=$SECONDS
# shellcheck disable=SC2046 # share's words are separate arguments
timeout --foreground -k 10 "$timeout_s" qemu-system-x86_64 \
	-accel "$accel" -cpu "$cpu" -smp "$cpus" -m "$mem" \
	-nodefaults -no-reboot -display none -monitor none -nic none \
	-kernel "$vmlinuz" -initrd "$run/initramfs.cpio" \
	-append "console=ttyS0 loglevel=4 panic=-1 oops=panic random.trust_cpu=on" \
	-serial "file:$console" -serial "file:$out" \
	-device virtio-rng-pci \
	$(share usr /usr) $(share etc /etc) $(share kernel "$kdir") \
	$(share bin "$run/bin") $(share checkout "$root") \
	</dev/null &
qemu=$!
trap 'kill "$qemu" 2>/dev/null || true' EXIT INT TERM
tail -n +1 -s 0.2 -f --pid="$qemu" "$out" | sed -u "s/\r\$//" &
tailer=$!
rc=0
wait "$qemu" || rc=$?
wait "$tailer" || true
trap - EXIT INT TERM
log "VM ran $(elapsed "$t0")"
[ "$rc" -eq 124 ] && die "VM did not finish within ${timeout_s}s (VMTEST_TIMEOUT); kernel log: $console"

marker=$(tr -d '\r' <"$out" | awk '$1 == "routelet-vmtest:" && $2 == "exit" {print $3}' | tail -n 1)
if [ -z "$marker" ]; then
	tail -n 30 "$console" >&2 || true
	die "the VM ended without reporting the tests' exit status (qemu exit $rc); kernel log: $console"
fi
skips=$(tr -d '\r' <"$out" | grep -E -e '--- SKIP' || true)
failed=0
if [ "$mode" = lane ] && [ -n "$skips" ]; then
	log "tests of the lane skipped (every one must run on this kernel):"
	echo "$skips" >&2
	failed=1
fi
if [ "$mode" = all ] && echo "$skips" | grep -qi ipip; then
	log "IPIP tests skipped:"
	echo "$skips" | grep -i ipip >&2
	failed=1
fi
if [ "$marker" -ne 0 ]; then
	log "tests failed in the VM (exit $marker):"
	tr -d '\r' <"$out" | grep -E -e '^(--- FAIL|FAIL )' >&2 || true
	failed=1
fi
[ "$failed" -eq 0 ] || exit 1
log "all tests passed on $kver"
