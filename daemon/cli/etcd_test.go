package cli

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/datastore/etcd"
)

// TestParsePools: etcd init's own flags are taken out in either form, the
// rest left for the daemon's configuration; bad pools are refused naming
// the value.
func TestParsePools(t *testing.T) {
	pools, rest, err := parsePools([]string{"--pool", "10.244.0.0/16", "--etcd-endpoints=http://a:2379", "--block-size=24", "-pool=fd00:244::/48", "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	want := []etcd.Pool{{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockSize: 24}, {CIDR: netip.MustParsePrefix("fd00:244::/48"), BlockSize: etcd.DefaultBlockSizeV6}}
	if !slices.Equal(pools, want) {
		t.Errorf("pools %v, want %v", pools, want)
	}
	if !slices.Equal(rest, []string{"--etcd-endpoints=http://a:2379", "--log-level", "debug"}) {
		t.Errorf("rest %q", rest)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-endpoints=http://a:2379"}, "--pool"},
		{[]string{"--pool=10.244.0.1/16"}, "10.244.0.0/16"},
		{[]string{"--pool=10.244.0.0/16", "--pool=10.245.0.0/16"}, "one pool per IP family"},
		{[]string{"--pool=10.244.0.0/16", "--block-size=12"}, "/12"},
		{[]string{"--pool=127.0.0.0/16"}, "127.0.0.0/16"},
	} {
		if _, _, err := parsePools(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parsePools(%q) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}
