// Package e2e holds routelet's privileged end-to-end tests: the built plugin
// binary run through libcni (the library containerd uses) from a fresh "node"
// network namespace, attaching fresh pod namespaces, for every supported CNI
// spec version. The tests skip when not run as root; each one creates and
// removes its own namespaces and never touches the machine's own network.
package e2e
