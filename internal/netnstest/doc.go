// Package netnstest builds throwaway network namespaces and simulated nodes
// for routelet's privileged tests, the demo and the benchmarks.
//
// A Node is a fresh network namespace standing in for a host: CNI plugins are
// executed through libcni from a goroutine locked to an OS thread that has
// entered the node namespace, so the plugin process inherits it exactly as it
// inherits the host namespace under containerd. Pods are further namespaces,
// passed to the plugin as CNI_NETNS paths.
//
// Every namespace is bind-mounted under /var/run/netns with a caller-chosen
// name, so `ip netns exec` works on it; StartIn runs a long-lived process
// such as routeletd that way, with Stop, Kill and a goroutine-safe log
// Buffer. Names start with OwnedPrefix (a prefix plus the creating process's
// PID), so runs going on at the same time never collide, and leftovers of
// crashed runs are found and removed by RemoveStale. Nothing here touches
// the namespace of the calling process: all kernel changes happen inside the
// namespaces this package created.
package netnstest
