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
# -tags grpcnotrace: see internal/netnstest.BuildTags.
RUN go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/routeletd ./daemon \
 && go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/routelet ./plugin \
 && go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o /out/portmap github.com/containernetworking/plugins/plugins/meta/portmap

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables ipset conntrack \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/routeletd /usr/local/bin/routeletd
COPY --from=build /out/routelet /out/portmap /opt/routelet/bin/
COPY install/install-cni.sh /opt/routelet/install-cni.sh
ENTRYPOINT ["/usr/local/bin/routeletd"]
