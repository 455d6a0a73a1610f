package config

import (
	"errors"
	"strings"
	"testing"
)

// TestCNIConfKeys: by default no conflist is written, under the default
// name; names a runtime would not load or that leave the directory are
// refused.
func TestCNIConfKeys(t *testing.T) {
	c, err := load(t, []string{"--node-name=n"}, nil, nil)
	if err != nil || c.CNIConfDir != "" || c.CNIConfTemplate != "" || c.CNIConfName != DefaultCNIConfName {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"--cni-conf-name=../10-routelet.conflist"},
		{"--cni-conf-name=10-routelet"},
		{"--cni-conf-name=10-routelet.conf"},
		{"--cni-conf-name=.10-routelet.conflist"},
	} {
		_, err := load(t, append([]string{"--node-name=n"}, args...), nil, nil)
		var cerr *Error
		name, val, _ := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
		if !errors.As(err, &cerr) || cerr.Key != name || cerr.Value != val {
			t.Errorf("%v: %v, want an error naming %s and %q", args, err, name, val)
		}
	}
}
