#!/usr/bin/env bash
# Runs inside the test VM, started by hack/vmtest/init with the shares
# mounted: loads the modules of hack/vmtest/modules from the shared kernel
# tree, makes the kernel's module autoloading use that tree too, then runs
# each line of the plan (package, -test.run pattern) with the host-built
# test binary in the package's directory, printing `go test -v` output and
# an ok/FAIL line per package. Exits non-zero when any package failed.
set -uo pipefail
mode=$1
checkout=$(cd "$(dirname "$0")/../.." && pwd)
kver=$(uname -r)

# modprobe against the shared tree, for the tests and for the kernel's own
# request_module (module autoloading, e.g. ipip on the first tunl0).
mkdir -p /vmtest/sbin
cat >/vmtest/sbin/modprobe <<EOS
#!/bin/sh
exec /usr/sbin/modprobe -d /vmtest/kernel "\$@"
EOS
chmod 0755 /vmtest/sbin/modprobe
echo /vmtest/sbin/modprobe >/proc/sys/kernel/modprobe
export PATH=/vmtest/sbin:$PATH

echo "routelet-vmtest: kernel $kver, $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB, mode $mode, up $(cut -d' ' -f1 /proc/uptime)s"
# The list holds the modules this kernel has as modules (vmtest.sh sorted
# out the built-in and missing ones); one modprobe loads them all. The lane
# leaves ipip to its first test's routeletd; the whole suite runs with it
# loaded from the start, so every namespace of every test has the fallback
# tunl0.
mods=$(cat /vmtest/modules)
[ "$mode" = all ] && mods="$mods ipip"
# shellcheck disable=SC2086 # one module name per word
if ! modprobe -a $mods; then
	echo "routelet-vmtest: modprobe failed"
	exit 1
fi
echo "routelet-vmtest: loaded $(echo $mods | wc -w) modules with their dependencies, up $(cut -d' ' -f1 /proc/uptime)s"

export ROUTELET_PREBUILT_BIN=/vmtest/bin
export ROUTELET_REQUIRE_IPIP=1
export ROUTELET_REQUIRE_KERNEL_WIREGUARD=1
timeout=15m
[ "$mode" = all ] && timeout=40m
rc=0
while read -r pkg regex; do
	name=$(echo "${pkg#./}" | tr / _).test
	start=$SECONDS
	echo "routelet-vmtest: run $pkg -test.run '$regex'"
	(cd "$checkout/$pkg" && "/vmtest/bin/$name" -test.v -test.count=1 -test.timeout="$timeout" -test.run "$regex")
	prc=$?
	if [ $prc -eq 0 ]; then
		echo "ok   github.com/routelet/routelet/${pkg#./} $((SECONDS - start))s"
	else
		echo "FAIL github.com/routelet/routelet/${pkg#./} $((SECONDS - start))s (exit $prc)"
		rc=1
	fi
done </vmtest/bin/plan
exit $rc
