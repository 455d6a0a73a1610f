# routelet's image: routeletd, the CNI plugins the DaemonSet's initContainer
# installs (routelet, portmap) and install-cni.sh, on Debian with the
# iptables/ipset/conntrack userland routeletd runs. Paths are pinned in
# install/image/layout.go. Without a Docker daemon, `make image` writes the
# same layout as a tarball for `ctr images import` (see README).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY third_party/gobgp/go.mod third_party/gobgp/go.sum third_party/gobgp/
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
# The release's version (docker build --build-arg VERSION=v0.1.0), stamped
# into both binaries (internal/buildinfo) and the image's label; empty:
# unstamped, the binaries report "dev".
ARG VERSION=
# -tags grpcnotrace: see internal/netnstest.BuildTags.
RUN ld="-s -w${VERSION:+ -X github.com/routelet/routelet/internal/buildinfo.version=$VERSION}" \
 && go build -trimpath -tags grpcnotrace -ldflags "$ld" -o /out/routeletd ./daemon \
 && go build -trimpath -tags grpcnotrace -ldflags "$ld" -o /out/routelet ./plugin \
 && go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/portmap github.com/containernetworking/plugins/plugins/meta/portmap

FROM debian:bookworm-slim
ARG VERSION=
LABEL org.opencontainers.image.title=routelet org.opencontainers.image.version=$VERSION
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables ipset conntrack \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/routeletd /usr/local/bin/routeletd
COPY --from=build /out/routelet /out/portmap /opt/routelet/bin/
COPY install/install-cni.sh /opt/routelet/install-cni.sh
ENTRYPOINT ["/usr/local/bin/routeletd"]
