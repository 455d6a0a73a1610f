package inspect

import (
	"errors"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/nodespace"
)

// BlockUse counts, for each block, the addresses claimed in the built-in
// IPAM's directory (<stateDir>/ipam: one claim file per address in
// addrs/). A missing directory is no claims.
func BlockUse(ipamDir string, blocks []netip.Prefix) ([]statusapi.Block, error) {
	out := make([]statusapi.Block, 0, len(blocks))
	for _, b := range blocks {
		out = append(out, statusapi.Block{CIDR: b.String(), Size: blockSize(b)})
	}
	ents, err := os.ReadDir(filepath.Join(ipamDir, "addrs"))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	for _, e := range ents {
		a, err := netip.ParseAddr(e.Name())
		if err != nil {
			continue // temp files
		}
		for i, b := range blocks {
			if b.Contains(a) && !nodespace.Reserved(b, a) {
				out[i].Used++
				break
			}
		}
	}
	return out, nil
}

// blockSize is how many addresses IPAM can hand out in b (its reserved
// ones excluded), saturated at math.MaxInt32 for huge IPv6 blocks.
func blockSize(b netip.Prefix) int {
	host := b.Addr().BitLen() - b.Bits()
	if host >= 31 {
		return math.MaxInt32
	}
	n := 1<<host - 1
	if b.Addr().Is4() && host > 0 {
		n--
	}
	return max(n, 0)
}
