// Package image describes routelet's container image: where the binaries
// and the installer live inside it (the Dockerfile, the daemonless builder
// in hack/image and the DaemonSet all follow these paths), and builds the
// image as an OCI tarball without a container daemon.
package image

// Paths inside the image.
const (
	// Routeletd is the daemon, the DaemonSet container's command.
	Routeletd = "/usr/local/bin/routeletd"
	// PluginDir holds the CNI plugins the initContainer installs.
	PluginDir = "/opt/routelet/bin"
	// Installer is install/install-cni.sh, the initContainer's command.
	Installer = "/opt/routelet/install-cni.sh"
)

// Plugins are the CNI plugin binaries in PluginDir: routelet, and portmap,
// which the conflist chains after it.
var Plugins = []string{"routelet", "portmap"}

// Userland lists the programs routeletd and the installer run, each of
// which the image must hold (on PATH, /usr/sbin:/usr/bin:/sbin:/bin).
var Userland = []string{
	"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore",
	"iptables-nft", "iptables-legacy", "ip6tables-nft", "ip6tables-legacy",
	"ipset", "conntrack", "sh", "cp", "mv", "mktemp", "chmod", "sync", "basename", "cmp",
}
