package peers

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/state"
)

// TestParseBGPPeer: the spec's forms and every refusal, each error naming
// the spec and the bad value.
func TestParseBGPPeer(t *testing.T) {
	for _, tc := range []struct {
		spec       string
		fromRecord bool
		want       BGPPeer
		wantErr    string // "" accepted
	}{
		{spec: "192.0.2.1,as=64512", want: BGPPeer{Address: netip.MustParseAddr("192.0.2.1"), ASN: 64512}},
		{spec: "2001:db8::1,as=4200000000,port=1179,route-reflector", fromRecord: true,
			want: BGPPeer{Address: netip.MustParseAddr("2001:db8::1"), ASN: 4200000000, Port: 1179, RouteReflector: true}},
		{spec: " 10.0.0.1 , as = 65000 , password-file=/etc/routelet/tor.pw ", want: BGPPeer{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000, PasswordFile: "/etc/routelet/tor.pw"}},
		{spec: "10.0.0.1,route-reflector,as=1,port=65535", want: BGPPeer{Address: netip.MustParseAddr("10.0.0.1"), ASN: 1, Port: 65535, RouteReflector: true}},
		{spec: "10.0.0.1,as=4294967294", want: BGPPeer{Address: netip.MustParseAddr("10.0.0.1"), ASN: 4294967294}},
		{spec: "", wantErr: "no address"},
		{spec: ",as=1", wantErr: "no address"},
		{spec: "tor1,as=1", wantErr: `"tor1" is not an IP address`},
		{spec: "10.0.0.0/24,as=1", wantErr: `"10.0.0.0/24" is not an IP address`},
		{spec: "0.0.0.0,as=1", wantErr: "unspecified"},
		{spec: "::,as=1", wantErr: "unspecified"},
		{spec: "127.0.0.1,as=1", wantErr: "loopback"},
		{spec: "::1,as=1", wantErr: "loopback"},
		{spec: "224.0.0.5,as=1", wantErr: "multicast"},
		{spec: "ff02::5,as=1", wantErr: "multicast"},
		{spec: "169.254.1.1,as=1", wantErr: "link-local"},
		{spec: "fe80::1,as=1", wantErr: "link-local"},
		{spec: "fe80::1%eth0,as=1", wantErr: "zoned"},
		{spec: "::ffff:10.0.0.1,as=1", wantErr: "IPv4-mapped"},
		{spec: "255.255.255.255,as=1", wantErr: "broadcast"},
		{spec: "10.0.0.1", wantErr: "no as=N"},
		{spec: "10.0.0.1,port=179", wantErr: "no as=N"},
		{spec: "10.0.0.1,as=0", wantErr: `as "0": not an AS number`},
		{spec: "10.0.0.1,as=4294967295", wantErr: `as "4294967295"`},
		{spec: "10.0.0.1,as=-1", wantErr: `as "-1"`},
		{spec: "10.0.0.1,as=65000.1", wantErr: `as "65000.1"`},
		{spec: "10.0.0.1,as=", wantErr: `option "as" needs a value`},
		{spec: "10.0.0.1,as", wantErr: `option "as" needs a value`},
		{spec: "10.0.0.1,as=1,port=0", wantErr: `port "0": not a port`},
		{spec: "10.0.0.1,as=1,port=65536", wantErr: `port "65536"`},
		{spec: "10.0.0.1,as=1,port=bgp", wantErr: `port "bgp"`},
		{spec: "10.0.0.1,as=1,as=2", wantErr: `option "as" given twice`},
		{spec: "10.0.0.1,as=1,route-reflector,route-reflector", wantErr: `option "route-reflector" given twice`},
		{spec: "10.0.0.1,as=1,route-reflector=true", wantErr: `"route-reflector" takes no value`},
		{spec: "10.0.0.1,as=1,multihop=2", wantErr: `unknown option "multihop"`},
		{spec: "10.0.0.1,as=1,", wantErr: "empty option"},
		{spec: "10.0.0.1,as=1,,port=1", wantErr: "empty option"},
		{spec: "10.0.0.1,as=1,=5", wantErr: "empty option"},
		{spec: "10.0.0.1,as=1,password-file=tor.pw", wantErr: `password-file "tor.pw": not an absolute path`},
		{spec: "10.0.0.1,as=1,password-file=", wantErr: `option "password-file" needs a value`},
		{spec: "10.0.0.1,as=1,password-file=/etc/shadow", fromRecord: true, wantErr: `password-file "/etc/shadow": a datastore's peer cannot name a file`},
	} {
		p, err := ParseBGPPeer(tc.spec, tc.fromRecord)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `"`+tc.spec+`"`) {
				t.Errorf("ParseBGPPeer(%q, %v) = %+v, %v; want an error naming the spec and %q", tc.spec, tc.fromRecord, p, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("ParseBGPPeer(%q, %v) = %+v, %v; want %+v", tc.spec, tc.fromRecord, p, err, tc.want)
			continue
		}
		if back, err := ParseBGPPeer(p.String(), tc.fromRecord); err != nil || back != p {
			t.Errorf("ParseBGPPeer(%q) of its String = %+v, %v; want %+v", p.String(), back, err, p)
		}
	}
}

// FuzzParseBGPPeer: whatever the spec, ParseBGPPeer does not panic, and
// what it accepts is a peer a session can go to that its String spells
// back, with no password file from a record.
func FuzzParseBGPPeer(f *testing.F) {
	for _, s := range []string{"192.0.2.1,as=64512", "2001:db8::1,as=1,port=1179,route-reflector", "10.0.0.1,as=1,password-file=/p",
		",,,", "=", "10.0.0.1,as=1,as=1", "fe80::1%eth0,as=1", "1.2.3.4,as=4294967295", "::ffff:1.2.3.4,as=9"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, spec string, fromRecord bool) {
		p, err := ParseBGPPeer(spec, fromRecord)
		if err != nil {
			if p != (BGPPeer{}) {
				t.Fatalf("ParseBGPPeer(%q) failed (%v) but returned %+v", spec, err, p)
			}
			return
		}
		if checkBGPPeerAddr(p.Address) != nil || p.ASN == 0 || p.ASN > MaxASN || (fromRecord && p.PasswordFile != "") {
			t.Fatalf("ParseBGPPeer(%q, %v) accepted %+v", spec, fromRecord, p)
		}
		if back, err := ParseBGPPeer(p.String(), fromRecord); err != nil || back != p {
			t.Fatalf("ParseBGPPeer(%q) = %+v; its String %q parses as %+v, %v", spec, p, p.String(), back, err)
		}
	})
}

// TestBGPPeerPassword: the password is the file's content trimmed, 1–80
// bytes; no file is no password; a missing, empty, too long or
// non-regular file is an error naming it and not the content.
func TestBGPPeerPassword(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	peer := func(file string) BGPPeer {
		return BGPPeer{Address: netip.MustParseAddr("192.0.2.1"), ASN: 65000, PasswordFile: file}
	}
	if pw, err := peer("").Password(); pw != "" || err != nil {
		t.Errorf("no password file: %q, %v; want none", pw, err)
	}
	if pw, err := peer(write("ok", "  s3cret-tor\n")).Password(); pw != "s3cret-tor" || err != nil {
		t.Errorf("password = %q, %v; want s3cret-tor", pw, err)
	}
	if pw, err := peer(write("max", strings.Repeat("p", 80)+"\n")).Password(); len(pw) != 80 || err != nil {
		t.Errorf("80-byte password = %d bytes, %v", len(pw), err)
	}
	long := strings.Repeat("q", 81)
	for name, file := range map[string]string{
		"missing":   filepath.Join(dir, "missing"),
		"empty":     write("empty", " \n\t\n"),
		"too long":  write("long", long),
		"directory": dir,
		"device":    "/dev/zero",
	} {
		_, err := peer(file).Password()
		if err == nil || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), long) {
			t.Errorf("%s password file %s: %v; want an error naming the file, not the content", name, file, err)
		}
	}
}

// TestRecordBGPAS: a record's AS number reaches NodeInfo.BGP through
// Parse, Resolve and the Validator; a refused one (a refusal of bgpAS
// naming the value) leaves the node without BGP and the rest of the
// record as it is; it converts to and from a datastore's state.Node and
// counts for Equal.
func TestRecordBGPAS(t *testing.T) {
	for _, tc := range []struct {
		as   string
		want uint32
		bad  bool
	}{
		{"", 0, false}, {"64512", 64512, false}, {"1", 1, false}, {"4294967294", 4294967294, false},
		{"0", 0, true}, {"4294967295", 0, true}, {"-5", 0, true}, {"64512.0", 0, true}, {"AS64512", 0, true}, {" 64512", 0, true},
	} {
		x := newcomer(func(r *Record) { r.BGPAS = tc.as })
		n, refused := Parse(x)
		if n.BGP.ASN != tc.want {
			t.Errorf("Parse(bgpAS %q).BGP = %+v, want ASN %d", tc.as, n.BGP, tc.want)
		}
		if tc.bad != (len(refused) == 1) || (tc.bad && (refused[0].Field != FieldBGPAS || refused[0].Value != tc.as || !strings.Contains(refused[0].Error(), tc.as))) {
			t.Errorf("Parse(bgpAS %q) refused %v", tc.as, refused)
		}
		res := Resolve(Input{Self: self, Host: host, Records: []Record{b, c, x}, Seen: establishedSeen(), Now: t0.Add(time.Hour)})
		got, ok := find(res.Peers, "x")
		if !ok || got.BGP.ASN != tc.want || !slices.Equal(got.Blocks, pfx("10.244.77.0/24")) {
			t.Errorf("Resolve: x = %+v, %v; want ASN %d and its block", got, ok, tc.want)
		}
		v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return t0 }})
		if got, ok := find(v.Validate([]Record{b, x}), "x"); !ok || got.BGP.ASN != tc.want {
			t.Errorf("Validate: x = %+v, %v; want ASN %d", got, ok, tc.want)
		}
	}
	// A change of the AS alone reaches the Validator's output.
	v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return t0 }})
	x := newcomer(func(r *Record) { r.BGPAS = "65001" })
	v.Validate([]Record{b, x})
	x.BGPAS = "65002"
	if got, _ := find(v.Validate([]Record{b, x}), "x"); got.BGP.ASN != 65002 {
		t.Errorf("after the AS changed, x's BGP = %+v, want 65002", got.BGP)
	}

	n := state.Node{Name: "b", BGPAS: 4200000000}
	r := FromState(&n)
	if r.BGPAS != "4200000000" {
		t.Errorf("FromState = %+v", r)
	}
	if back := ToState(r); !state.SameNode(&back, &n) {
		t.Errorf("ToState(FromState(n)) = %+v, want %+v", back, n)
	}
	n.BGPAS = 0
	if r := FromState(&n); r.BGPAS != "" {
		t.Errorf("FromState of no AS = %q, want \"\"", r.BGPAS)
	}
	o := r
	o.BGPAS = "64513"
	if r.Equal(o) {
		t.Error("Equal ignores the BGP AS")
	}
}
