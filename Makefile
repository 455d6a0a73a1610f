# routelet — build, test, bench, demo. See README.md.
GO      ?= go
BIN     := bin
GOFLAGS ?=
# Build tags of every routelet binary: see internal/netnstest.BuildTags.
TAGS    := grpcnotrace
# The version stamped into the binaries (internal/buildinfo): the nearest
# v-tag as git describe prints it (v0.1.0 on the tag), and the commit;
# without a tag the binaries report dev-<commit>.
VERSION  ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null)
REVISION := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := $(if $(VERSION),-X github.com/routelet/routelet/internal/buildinfo.version=$(VERSION)) $(if $(REVISION),-X github.com/routelet/routelet/internal/buildinfo.revision=$(REVISION))

.PHONY: all deps build test test-unit test-bins image release manifests vmtest vmtest-all bench demo vet fmt clean

all: build

# Debian packages the demo and the tests need (iproute2, iptables, ping,
# conntrack, iperf3); installs only what is missing.
deps:
	@bash hack/deps.sh

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/routelet ./plugin
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/routeletd ./daemon

# Everything CI runs: vet, formatting, unit tests and the privileged tests
# (network namespaces; they skip with a reason when not root).
test: deps build
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# kube-apiserver and etcd for the tests against a real API server, and helm
# for the chart's, built from the Go module proxy into
# /var/cache/routelet-bins (ROUTELET_TEST_BINS overrides) and reused when
# present; cold, kube-apiserver takes 10+ minutes, helm about 2.
test-bins:
	$(GO) run ./hack/testbins

# The container image without a Docker daemon: static binaries on a
# userland from Debian packages, as a tarball for `ctr images import` or
# `docker load` (the Dockerfile builds the same image with a daemon).
image:
	$(GO) run ./hack/image -o $(BIN)/routelet-image.tar $(if $(VERSION),-version $(VERSION))

# The versioned set of this commit in dist/<version>/: binaries, image
# tarball (routelet:<version>), manifests pinned to it, the Helm chart
# package, CHANGELOG and SHA256SUMS. Needs a v-tag (or VERSION=...) and
# helm (make test-bins); see hack/release.sh.
release:
	@VERSION="$(VERSION)" bash hack/release.sh

# install/kubernetes/ from the Helm chart (install/helm/routelet), its one
# source; needs helm (make test-bins). The chart's test fails when they
# differ.
manifests:
	$(GO) run ./hack/manifests

# Debian's stock kernel (linux-image-amd64) under qemu, as root, the lane
# in hack/vmtest/lane: the IPIP tests, the multinode VXLAN e2e, the
# allowlist's overlay drop and the pod guards, and the kernel tests of the
# packages that depend on netlink event semantics (netwatch, overlaymgr,
# pkg/overlay, pkg/routes, the daemon's status and drift repairs); fails
# when any of them skips. Installs qemu-system-x86, busybox-static, cpio
# and kmod when missing; the kernel is cached in /var/cache/routelet-vmtest.
# See hack/vmtest/vmtest.sh.
vmtest:
	@bash hack/vmtest/vmtest.sh

# Every package's tests in that VM: how to check a change against a
# distribution kernel (about half an hour under emulation; not in CI).
vmtest-all:
	@bash hack/vmtest/vmtest.sh --all

# Unit tests only (no root needed).
test-unit:
	$(GO) test -count=1 -short ./...

# Go benchmarks, then the CNI plugin bench: routelet vs ptp+host-local
# through libcni (root; see docs/bench-plugin.md).
# Go benchmarks (each kernel-scale benchmark does its own repetitions, so
# one iteration; the IPAM and plugin micro-benchmarks need many), then the
# bench harnesses. Results and their reading: docs/bench-*.md.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m $$($(GO) list ./... | grep -v -e '/pkg/ipam$$' -e '/plugin$$')
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./pkg/ipam/
	$(GO) test -run '^$$' -bench . -benchtime 50x ./plugin/
	$(GO) run ./bench/cni
	$(GO) run ./bench/overlay -plugin-dir $(BIN) -rounds 3
	$(GO) run ./bench/overlay -plugin-dir $(BIN) -rounds 3 -encapsulation none
	$(GO) run ./bench/wireguard -plugin-dir $(BIN) -rounds 3
	$(GO) run ./bench/bgp -plugin-dir $(BIN) -rounds 3

demo: deps build
	$(GO) run ./demo -plugin-dir $(BIN)

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) dist
