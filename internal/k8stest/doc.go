// Package k8stest runs a real etcd and kube-apiserver for tests: on the
// host's loopback or inside a given network namespace, with a generated CA,
// serving and admin client certificates, a service-account key, RBAC
// authorization, and everything stopped (by PID) and removed in t.Cleanup.
//
// The binaries come from the cache that `make test-bins` (go run
// ./hack/testbins) fills from the Go module proxy; see internal/testbins.
// When they are missing, Start skips the test with the command to run, or
// fails it when ROUTELET_REQUIRE_TEST_BINS=1, so a lane that builds them
// never passes by skipping.
package k8stest
