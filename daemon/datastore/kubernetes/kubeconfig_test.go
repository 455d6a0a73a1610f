package kubernetes

import (
	"strings"
	"testing"
)

// TestKubeconfigBounded: a kubeconfig that is /dev/zero is refused
// naming it before client-go reads it (whole).
func TestKubeconfigBounded(t *testing.T) {
	_, err := ClientConfig("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "kubeconfig /dev/zero") || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ClientConfig(/dev/zero) = %v, want an error naming it", err)
	}
}
