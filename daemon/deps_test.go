package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClientsetLinked: routeletd does not link client-go's clientset,
// whose package initialisation registers every API group's types and
// costs the daemon about 9 MiB of RSS in every datastore mode; the
// Kubernetes datastore uses kubernetes.NewNodeClient (core/v1 only).
func TestNoClientsetLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "k8s.io/client-go/kubernetes" || p == "k8s.io/client-go/kubernetes/scheme" || (strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/core/v1") {
			t.Errorf("routeletd links %s", p)
		}
	}
}
