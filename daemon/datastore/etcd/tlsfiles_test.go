package etcd

import (
	"strings"
	"testing"
)

// TestTLSFilesBounded: a TLS file that is /dev/zero is refused naming
// the key and the path before the TLS package reads it (whole).
func TestTLSFilesBounded(t *testing.T) {
	for _, e := range []Conn{
		{Endpoints: []string{"https://127.0.0.1:1"}, CAFile: "/dev/zero"},
		{Endpoints: []string{"https://127.0.0.1:1"}, CertFile: "/dev/zero", KeyFile: "/dev/zero"},
	} {
		_, err := clientTLS(e)
		if err == nil || !strings.Contains(err.Error(), "/dev/zero: not a regular file") || !strings.Contains(err.Error(), "etcd-") {
			t.Errorf("clientTLS(%+v) = %v, want an error naming the key and /dev/zero", e, err)
		}
	}
}
