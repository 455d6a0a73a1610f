package bgpmgr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/peers"
)

// MaxPasswordLen is the longest TCP-MD5 key the kernel takes
// (TCP_MD5SIG_MAXKEYLEN).
const MaxPasswordLen = 80

// GlobalPeers turns the configured peers (bgp-peer) into Config.Peers:
// each password file is read (its trailing line ending dropped) and must
// hold a password of 1 to MaxPasswordLen bytes without control
// characters; maxPrefixes is every session's limit. The error names every
// file that cannot be used.
func GlobalPeers(ps []peers.BGPPeer, maxPrefixes int) ([]bgp.Peer, error) {
	out := make([]bgp.Peer, 0, len(ps))
	var errs []error
	for _, p := range ps {
		bp := bgp.Peer{Address: p.Address, ASN: p.ASN, Port: p.Port, RouteReflector: p.RouteReflector,
			MaxPrefixes: maxPrefixes, Description: "global"}
		if p.PasswordFile != "" {
			pw, err := readPassword(p.PasswordFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("bgp peer %s: password file: %w", p.Address, err))
				continue
			}
			bp.Password = pw
		}
		out = append(out, bp)
	}
	return out, errors.Join(errs...)
}

// readPassword reads a TCP-MD5 password from path.
func readPassword(path string) (string, error) {
	b, err := readlimit.File(path, MaxPasswordLen+2)
	if err != nil {
		return "", err
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	switch {
	case pw == "":
		return "", fmt.Errorf("%s is empty", path)
	case len(pw) > MaxPasswordLen:
		return "", fmt.Errorf("%s holds %d bytes, more than the %d of a TCP-MD5 key", path, len(pw), MaxPasswordLen)
	case strings.ContainsFunc(pw, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", fmt.Errorf("%s holds a control character (one password on one line)", path)
	}
	return pw, nil
}
