package podnet

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
)

func TestVethName(t *testing.T) {
	hash := func(s string) string {
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	tests := []struct {
		name                         string
		prefix, ns, pod, cid, ifname string
		want                         string
	}{
		{"kubernetes pod", "cali", "default", "web-0", "abc", "eth0", "cali" + hash("default.web-0")[:11]},
		{"kubernetes pod ignores container id", "cali", "default", "web-0", "other", "eth0", "cali" + hash("default.web-0")[:11]},
		{"second interface of a pod", "cali", "default", "web-0", "abc", "net1", "cali" + hash("default.web-0.net1")[:11]},
		{"no kubernetes args", "cali", "", "", "abc", "eth0", "cali" + hash("abc.eth0")[:11]},
		{"only namespace given", "cali", "default", "", "abc", "eth0", "cali" + hash("abc.eth0")[:11]},
		{"short prefix keeps 15 bytes", "r", "", "", "abc", "eth0", "r" + hash("abc.eth0")[:14]},
		{"long prefix keeps 4 hash chars", "routeletpod", "", "", "abc", "eth0", "routeletpod" + hash("abc.eth0")[:4]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := VethName(tc.prefix, tc.ns, tc.pod, tc.cid, tc.ifname)
			if got != tc.want {
				t.Fatalf("VethName = %q, want %q", got, tc.want)
			}
			if len(got) > 15 {
				t.Fatalf("VethName %q is %d bytes, longer than 15", got, len(got))
			}
		})
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, ok := range []string{"cali", "r", "pod-", "a_b", "abcdefghijk"} {
		if err := ValidatePrefix(ok); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "abcdefghijkl", "1cali", "ca/li", "ca li", "cali:", "..", "cäli"} {
		err := ValidatePrefix(bad)
		if err == nil {
			t.Errorf("ValidatePrefix(%q) = nil, want error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "\""+bad+"\"") && !strings.Contains(err.Error(), bad) {
			t.Errorf("ValidatePrefix(%q) error %q does not name the value", bad, err)
		}
	}
}
