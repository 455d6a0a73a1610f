#!/usr/bin/env bash
# make release: the versioned set of one commit in dist/<version>/ — both
# binaries (static, stamped with the version), the image tarball (tagged
# routelet:<version>, labelled with the version and the commit), the
# Kubernetes manifests with the image pinned to that tag, the Helm chart
# packaged as that version (its image tag defaulting to it), the
# CHANGELOG, and SHA256SUMS of them all. The manifests and the chart
# package come from hack/manifests, with helm the cached test binary (make
# test-bins).
#
# The version is VERSION, else `git describe --tags --match 'v*' --dirty`
# (v0.1.0 on the tag). A tree with local changes is refused unless
# RELEASE_ALLOW_DIRTY=1 (a set to test with, never to publish).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

version=${VERSION:-$(git describe --tags --match 'v*' --dirty 2>/dev/null || true)}
if [ -z "$version" ]; then
	echo "release: no v-tag on HEAD or before it: tag the release first (git tag -a v0.1.0 -m v0.1.0), or set VERSION" >&2
	exit 1
fi
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release: version \"$version\": want vMAJOR.MINOR.PATCH with an optional -suffix" >&2
	exit 1
fi
if [[ $version == *-dirty ]] && [ "${RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
	echo "release: $version: the tree has local changes; commit them (or RELEASE_ALLOW_DIRTY=1 for a set to test with)" >&2
	exit 1
fi

if ! go run ./hack/manifests -check; then
	echo "release: install/kubernetes is not the chart's render: run make manifests and commit" >&2
	exit 1
fi

out=dist/$version
rm -rf "$out"
mkdir -p "$out"
ldflags="-s -w -X github.com/routelet/routelet/internal/buildinfo.version=$version -X github.com/routelet/routelet/internal/buildinfo.revision=$(git rev-parse HEAD)"
for b in routelet=./plugin routeletd=./daemon; do
	CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "$ldflags" -o "$out/${b%%=*}" "${b#*=}"
done
go run ./hack/image -o "$out/routelet-image-$version.tar" -tag "routelet:$version" -version "$version"
chart=$(basename "$(go run ./hack/manifests -release "$version" -out "$out")")
if grep -q "routelet:latest" "$out"/kubernetes/*.yaml; then
	echo "release: a manifest still names routelet:latest" >&2
	exit 1
fi
cp CHANGELOG.md "$out/"
(cd "$out" && sha256sum routelet routeletd "routelet-image-$version.tar" "$chart" CHANGELOG.md kubernetes/*.yaml >SHA256SUMS)
got=$("$out/routeletd" version)
if [ "$got" != "routeletd $version" ]; then
	echo "release: $out/routeletd version printed \"$got\", want \"routeletd $version\"" >&2
	exit 1
fi
echo "release: $out"
