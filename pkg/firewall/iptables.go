package firewall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
)

// Backends of the iptables binaries, for NewIPTables.
const (
	// BackendDefault uses whatever `iptables` / `ip6tables` is on PATH
	// (on Debian, the alternatives system picks nft or legacy).
	BackendDefault = ""
	// BackendNFT uses iptables-nft / ip6tables-nft.
	BackendNFT = "nft"
	// BackendLegacy uses iptables-legacy / ip6tables-legacy.
	BackendLegacy = "legacy"
)

// lockWait is how long, in seconds, every iptables command waits for the
// xtables lock.
const lockWait = 5

// Binary returns the iptables binary name for family and backend.
func Binary(family ipset.Family, backend string) (string, error) {
	base := "iptables"
	if family == ipset.IPv6 {
		base = "ip6tables"
	}
	switch backend {
	case BackendDefault:
		return base, nil
	case BackendNFT, BackendLegacy:
		return base + "-" + backend, nil
	}
	return "", fmt.Errorf("iptables backend %q: want %q, %q or empty for the default", backend, BackendNFT, BackendLegacy)
}

// IPTables is the Table of one iptables binary: a go-iptables handle (its
// methods are promoted) plus what go-iptables lacks: ListTable, the
// whole-table read, run with the same binary and the same lock-wait
// arguments (go-iptables v0.8 exposes neither, so NewIPTables derives them
// the way go-iptables does), and Generation, the nf_tables ruleset
// generation for iptables-nft.
type IPTables struct {
	*iptables.IPTables
	// path is the binary, resolved on PATH the way go-iptables resolves
	// it; wait are the arguments go-iptables appends to every command.
	path string
	wait []string
	// nft is whether the binary is iptables-nft (its --version says
	// nf_tables), whose rules live in the nf_tables ruleset.
	nft bool
	// family is the binary's address family.
	family ipset.Family
	// gen, when set, is the socket Generation reads over instead of one
	// opened per call (see NewIPTablesPair).
	gen *nlutil.Conn
}

var _ Table = (*IPTables)(nil)

// NewIPTables returns the Table for family using backend's binary, waiting
// up to 5 s for the xtables lock. It runs `<binary> --version` (twice: once
// in go-iptables) to learn the binary's features and backend.
func NewIPTables(family ipset.Family, backend string) (*IPTables, error) {
	bin, err := Binary(family, backend)
	if err != nil {
		return nil, err
	}
	proto := iptables.ProtocolIPv4
	if family == ipset.IPv6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(bin), iptables.Timeout(lockWait))
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", bin, err)
	}
	// go-iptables does the same lookup and keeps the result unexported.
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", bin, err)
	}
	version, err := exec.Command(path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("iptables %s --version: %w", path, err)
	}
	return &IPTables{IPTables: ipt, path: path, wait: waitArgs(ipt.GetIptablesVersion()),
		nft: strings.Contains(string(version), "nf_tables"), family: family}, nil
}

// HasTable implements Table: for iptables-nft, whether the nf_tables
// ruleset of the calling thread's namespace holds table in the binary's
// family (one netlink request); for iptables-legacy, whether the kernel
// lists it in /proc/thread-self/net/ip_tables_names (ip6_tables_names),
// which holds the tables instantiated in that namespace.
func (t *IPTables) HasTable(table string) (bool, error) {
	if t.nft {
		return nftHasTable(t.family, table)
	}
	name := "ip_tables_names"
	if t.family == ipset.IPv6 {
		name = "ip6_tables_names"
	}
	return legacyHasTable("/proc/thread-self/net/"+name, table)
}

// DeleteTable implements Table.
func (t *IPTables) DeleteTable(table string, gen uint32) error {
	if !t.nft {
		return fmt.Errorf("iptables-legacy cannot remove table %s: %w", table, errors.ErrUnsupported)
	}
	return nftDelete(t.family, table, "", gen)
}

// DeleteBaseChain implements Table.
func (t *IPTables) DeleteBaseChain(table, chain string, gen uint32) error {
	if !t.nft {
		return fmt.Errorf("iptables-legacy cannot remove built-in chain %s/%s: %w", table, chain, errors.ErrUnsupported)
	}
	return nftDelete(t.family, table, chain, gen)
}

// legacyHasTable reports whether the x_tables names file at path lists
// table. A missing file means the kernel has no such tables at all.
func legacyHasTable(path, table string) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("iptables tables: %w", err)
	}
	return slices.Contains(strings.Fields(string(b)), table), nil
}

// Generation implements Table: the nf_tables ruleset generation of the
// calling thread's namespace (of the namespace of NewIPTablesPair's caller
// for its tables) for iptables-nft, none for iptables-legacy.
func (t *IPTables) Generation() (uint32, bool, error) {
	if !t.nft {
		return 0, false, nil
	}
	gen, err := nlutil.NFTGeneration(t.gen)
	if err != nil {
		return 0, false, err
	}
	return gen, true, nil
}

// waitArgs returns the lock-wait arguments go-iptables (v0.8) appends for an
// iptables of version v1.v2.v3: "--wait" from 1.4.20, with the timeout in
// seconds from 1.6.0. Older binaries have no --wait; go-iptables then takes
// /run/xtables.lock itself but goes ahead without it when it is busy, so a
// read runs without it too.
func waitArgs(v1, v2, v3 int) []string {
	switch {
	case v1 > 1 || v1 == 1 && v2 >= 6:
		return []string{"--wait", strconv.Itoa(lockWait)}
	case v1 == 1 && (v2 > 4 || v2 == 4 && v3 >= 20):
		return []string{"--wait"}
	}
	return nil
}

// ListTable returns `iptables -t table -S`: the policy or -N line of every
// chain of the table, then every rule, chain by chain, in one exec.
func (t *IPTables) ListTable(table string) ([]string, error) {
	args := append([]string{t.path, "-t", table, "-S"}, t.wait...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Cmd{Path: t.path, Args: args, Stdout: &stdout, Stderr: &stderr}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, &ExitError{Args: args, Status: ee.ExitCode(), Stderr: strings.TrimSpace(stderr.String())}
		}
		return nil, fmt.Errorf("running %v: %w", args, err)
	}
	out := strings.TrimSuffix(stdout.String(), "\n")
	if out == "" {
		return nil, nil
	}
	return strings.Split(out, "\n"), nil
}

// ExitError is an iptables binary that ListTable ran exiting with a
// non-zero status.
type ExitError struct {
	Args   []string // the command line
	Status int      // its exit status
	Stderr string   // what it printed on stderr
}

// Error implements error.
func (e *ExitError) Error() string {
	return fmt.Sprintf("running %v: exit status %d: %s", e.Args, e.Status, e.Stderr)
}

// ExitStatus returns the exit status, like go-iptables' errors do.
func (e *ExitError) ExitStatus() int { return e.Status }

// splitTable parses ListTable's output into each chain's lines as
// `iptables -t table -S chain` prints them: the policy (built-in chains) or
// -N line first, then the chain's rules in order. A chain that is not in
// the map does not exist.
func splitTable(lines []string) map[string][]string {
	chains := map[string][]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "-P", "-N", "-A":
			chains[f[1]] = append(chains[f[1]], l)
		}
	}
	return chains
}
