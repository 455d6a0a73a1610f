package bgpmgr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/pkg/peers"
)

// TestGlobalPeers: a password file's one line is the session's password;
// an empty, overlong or multi-line file, or a missing one, is an error
// naming it, and that peer is left out.
func TestGlobalPeers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good", "s3cret\n")
	ps, err := GlobalPeers([]peers.BGPPeer{
		{Address: a("192.0.2.9"), ASN: 65000, Port: 1179, RouteReflector: true, PasswordFile: good},
		{Address: a("192.0.2.10"), ASN: 65001},
	}, 50)
	if err != nil || len(ps) != 2 {
		t.Fatalf("peers %+v err %v", ps, err)
	}
	if p := ps[0]; p.Password != "s3cret" || p.Port != 1179 || !p.RouteReflector || p.MaxPrefixes != 50 || p.Description != "global" {
		t.Errorf("peer %+v", p)
	}
	if ps[1].Password != "" {
		t.Errorf("no password file, password %q", ps[1].Password)
	}
	for name, content := range map[string]string{
		"empty": "\n", "long": strings.Repeat("x", MaxPasswordLen+1), "lines": "one\ntwo\n",
	} {
		path := write(name, content)
		ps, err := GlobalPeers([]peers.BGPPeer{{Address: a("192.0.2.9"), ASN: 65000, PasswordFile: path}}, 0)
		if err == nil || !strings.Contains(err.Error(), path) || len(ps) != 0 {
			t.Errorf("%s: peers %+v err %v, want an error naming %s", name, ps, err, path)
		}
	}
	if _, err := GlobalPeers([]peers.BGPPeer{{Address: a("192.0.2.9"), ASN: 65000, PasswordFile: filepath.Join(dir, "missing")}}, 0); err == nil {
		t.Error("a missing password file: no error")
	}
}
