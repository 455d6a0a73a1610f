package peers

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/routelet/routelet/internal/readlimit"
)

// BGP limits.
const (
	// MaxASN is the highest AS number a node or peer may have:
	// 4294967295 is reserved (RFC 7300), as is 0 (RFC 7607).
	MaxASN = 1<<32 - 2
	// MaxBGPPasswordLen is the longest TCP-MD5 password the kernel takes
	// (TCP_MD5SIG_MAXKEYLEN).
	MaxBGPPasswordLen = 80
	// maxPasswordFile bounds a password file's size before it is trimmed:
	// a password and a line break, with room for comments of an editor.
	maxPasswordFile = 4096
)

// ParseASN parses an AS number in decimal: 1–4294967294 (0 and
// 4294967295 are reserved). The error does not repeat the value.
func ParseASN(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n > MaxASN {
		return 0, fmt.Errorf("not an AS number (1-%d)", uint32(MaxASN))
	}
	return uint32(n), nil
}

// The options of a BGP peer spec.
const (
	bgpOptAS             = "as"
	bgpOptPort           = "port"
	bgpOptPasswordFile   = "password-file"
	bgpOptRouteReflector = "route-reflector"
)

// ParseBGPPeer parses a BGP peer spec,
// ADDRESS,as=N[,port=N][,password-file=PATH][,route-reflector]: the
// bgp-peer configuration key's value, and each spec of a datastore's
// per-node peers (fromRecord). The address must be one a BGP session can
// go to: not unspecified, loopback, multicast or link-local, not zoned
// nor IPv4-mapped. as is required (1–4294967294); port 1–65535 (absent:
// 179); password-file an absolute path, read by Password, never here.
// fromRecord refuses password-file: what a datastore holds never makes
// the daemon read a file. An option given twice or unknown is refused.
// Every error names the spec and the bad part.
func ParseBGPPeer(spec string, fromRecord bool) (BGPPeer, error) {
	fail := func(format string, a ...any) (BGPPeer, error) {
		return BGPPeer{}, fmt.Errorf("bgp peer %q: %s", spec, fmt.Sprintf(format, a...))
	}
	parts := strings.Split(spec, ",")
	addr := strings.TrimSpace(parts[0])
	if addr == "" {
		return fail("no address (want ADDRESS,as=N[,port=N][,password-file=PATH][,route-reflector])")
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fail("%q is not an IP address", addr)
	}
	if err := checkBGPPeerAddr(a); err != nil {
		return fail("address %s: %v", addr, err)
	}
	p := BGPPeer{Address: a}
	seen := map[string]bool{}
	for _, opt := range parts[1:] {
		opt = strings.TrimSpace(opt)
		name, val, hasVal := strings.Cut(opt, "=")
		name = strings.TrimSpace(name)
		val = strings.TrimSpace(val)
		if name == "" {
			return fail("empty option %q", opt)
		}
		switch name {
		case bgpOptAS, bgpOptPort, bgpOptPasswordFile, bgpOptRouteReflector:
		default:
			return fail("unknown option %q (want as, port, password-file, route-reflector)", name)
		}
		if seen[name] {
			return fail("option %q given twice", name)
		}
		seen[name] = true
		if name == bgpOptRouteReflector {
			if hasVal {
				return fail("option %q takes no value (got %q)", name, val)
			}
			p.RouteReflector = true
			continue
		}
		if !hasVal || val == "" {
			return fail("option %q needs a value (%s=…)", name, name)
		}
		switch name {
		case bgpOptAS:
			if p.ASN, err = ParseASN(val); err != nil {
				return fail("as %q: %v", val, err)
			}
		case bgpOptPort:
			n, err := strconv.ParseUint(val, 10, 16)
			if err != nil || n == 0 {
				return fail("port %q: not a port (1-65535)", val)
			}
			p.Port = uint16(n)
		case bgpOptPasswordFile:
			if fromRecord {
				return fail("password-file %q: a datastore's peer cannot name a file (set it in the configuration's bgp-peer)", val)
			}
			if !filepath.IsAbs(val) {
				return fail("password-file %q: not an absolute path", val)
			}
			p.PasswordFile = filepath.Clean(val)
		}
	}
	if !seen[bgpOptAS] {
		return fail("no as=N (the peer's AS number)")
	}
	return p, nil
}

// checkBGPPeerAddr refuses an address a BGP session cannot be kept with.
func checkBGPPeerAddr(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return errors.New("zoned addresses are not allowed")
	case a.Is4In6():
		return errors.New("IPv4-mapped addresses are not allowed (write the IPv4 address)")
	case a.IsUnspecified():
		return errors.New("unspecified")
	case a.IsLoopback():
		return errors.New("loopback")
	case a.IsMulticast():
		return errors.New("multicast")
	case a.IsLinkLocalUnicast():
		return errors.New("link-local")
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return errors.New("broadcast")
	}
	return nil
}

// String is p as a spec ParseBGPPeer parses back: the options that are
// set, in the order as, port, password-file, route-reflector.
func (p BGPPeer) String() string {
	var b strings.Builder
	b.WriteString(p.Address.String())
	b.WriteString(",as=")
	b.WriteString(strconv.FormatUint(uint64(p.ASN), 10))
	if p.Port != 0 {
		b.WriteString(",port=")
		b.WriteString(strconv.Itoa(int(p.Port)))
	}
	if p.PasswordFile != "" {
		b.WriteString(",password-file=")
		b.WriteString(p.PasswordFile)
	}
	if p.RouteReflector {
		b.WriteString(",route-reflector")
	}
	return b.String()
}

// Password reads the peer's TCP-MD5 password from PasswordFile: the
// file's content without leading and trailing white space, 1–80 bytes
// (the kernel's limit). No PasswordFile is no password (""). The daemon
// calls it whenever it (re)configures the session, so a rotated file
// takes effect then; the configuration checks the file the same way at
// load. The error names the file, never the content.
func (p BGPPeer) Password() (string, error) {
	if p.PasswordFile == "" {
		return "", nil
	}
	// A regular file only: a FIFO or a device would block or never end.
	if err := readlimit.CheckFile(p.PasswordFile, maxPasswordFile); err != nil {
		return "", fmt.Errorf("bgp peer %s: password-file: %w", p.Address, err)
	}
	data, err := readlimit.File(p.PasswordFile, maxPasswordFile)
	if err != nil {
		return "", fmt.Errorf("bgp peer %s: password-file: %w", p.Address, err)
	}
	pw := strings.TrimSpace(string(data))
	switch {
	case pw == "":
		return "", fmt.Errorf("bgp peer %s: password-file %s is empty", p.Address, p.PasswordFile)
	case len(pw) > MaxBGPPasswordLen:
		return "", fmt.Errorf("bgp peer %s: password-file %s: the password is %d bytes, at most %d are allowed", p.Address, p.PasswordFile, len(pw), MaxBGPPasswordLen)
	}
	return pw, nil
}
