package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// procSys is where sysctls live. /proc/sys/net shows the network namespace of
// the thread that opens the file, which is why callers pin their thread.
const procSys = "/proc/sys"

// Sysctl is one kernel setting: a key under /proc/sys and the value
// routelet wants it to have.
type Sysctl struct {
	Key, Value string
	// IfPresent: the setting applies only where the kernel has it (an IPv6
	// setting on a node whose interfaces have IPv6 disabled); a missing
	// key is then not an error.
	IfPresent bool
	// Announced: the kernel announces a change of this setting with an
	// RTM_NEWNETCONF notification (forwarding, proxy_arp, proxy_ndp), so a
	// keeper need only read it when told; the others must be polled.
	Announced bool
}

// HostSysctls is the one table of the settings the host side of a pod veth
// carries: the plugin's ADD writes them before the link comes up, and
// routeletd re-asserts them on every veth it owns. They make the veth a
// router port: it answers ARP for the pod's gateway (proxy_arp, without the
// default random delay), forwards, and never autoconfigures from a router
// advertisement a pod sends. With an IPv6 pod the veth also does proxy NDP
// and IPv6 forwarding, without duplicate address detection (the gateway
// address is NODAD anyway); an IPv4-only pod's veth still refuses router
// advertisements where the node has IPv6. Changes of proxy_arp, proxy_ndp
// and forwarding are Announced; proxy_delay, accept_ra and accept_dad
// change silently.
func HostSysctls(iface string, ipv6 bool) []Sysctl {
	settings := []Sysctl{
		{Key: "net/ipv4/conf/" + iface + "/proxy_arp", Value: "1", Announced: true},
		{Key: "net/ipv4/neigh/" + iface + "/proxy_delay", Value: "0"},
		{Key: "net/ipv4/conf/" + iface + "/forwarding", Value: "1", Announced: true},
	}
	if !ipv6 {
		return append(settings, Sysctl{Key: "net/ipv6/conf/" + iface + "/accept_ra", Value: "0", IfPresent: true})
	}
	return append(settings,
		Sysctl{Key: "net/ipv6/conf/" + iface + "/accept_ra", Value: "0"},
		Sysctl{Key: "net/ipv6/conf/" + iface + "/accept_dad", Value: "0"},
		Sysctl{Key: "net/ipv6/conf/" + iface + "/proxy_ndp", Value: "1", Announced: true},
		Sysctl{Key: "net/ipv6/conf/" + iface + "/forwarding", Value: "1", Announced: true},
	)
}

// NodeSysctls are the node-wide settings pods need: IPv4 forwarding, and
// for IPv6 pods IPv6 forwarding. IPv6 forwarding is only wanted for IPv6
// pods, because turning it on makes the kernel ignore router advertisements
// on every interface. Both are Announced (as the "all" settings).
func NodeSysctls(ipv6 bool) []Sysctl {
	s := []Sysctl{{Key: "net/ipv4/ip_forward", Value: "1", Announced: true}}
	if ipv6 {
		s = append(s, Sysctl{Key: "net/ipv6/conf/all/forwarding", Value: "1", Announced: true})
	}
	return s
}

// hostSysctls writes HostSysctls(iface, ipv6) in the calling thread's
// namespace.
func hostSysctls(iface string, ipv6 bool) error {
	for _, s := range HostSysctls(iface, ipv6) {
		if s.IfPresent {
			if _, err := os.Stat(filepath.Join(procSys, s.Key)); err != nil {
				continue
			}
		}
		if err := writeSysctl(s.Key, s.Value); err != nil {
			return err
		}
	}
	return nil
}

// EnableForwarding writes NodeSysctls(ipv6) in the calling thread's network
// namespace, each only when it does not have its value already: concurrent
// ADDs then never rewrite a setting, and a node that forwards already sees
// no change.
func EnableForwarding(ipv6 bool) error {
	_, err := EnsureSysctls(NodeSysctls(ipv6))
	return err
}

// EnsureSysctls reads each setting in the calling thread's namespace and
// writes the ones whose value differs; it returns the keys it wrote. A
// missing IfPresent key is skipped; any other failure stops it and is
// returned with the keys written so far.
func EnsureSysctls(settings []Sysctl) ([]string, error) {
	return ensureSysctls(settings, func(s Sysctl) (string, error) { return readSysctlFast(s.Key) })
}

// ensureSysctls is EnsureSysctls reading each setting with read.
func ensureSysctls(settings []Sysctl, read func(Sysctl) (string, error)) ([]string, error) {
	var wrote []string
	for _, s := range settings {
		cur, err := read(s)
		if err != nil {
			if s.IfPresent && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return wrote, err
		}
		if cur == s.Value {
			continue
		}
		if err := writeSysctl(s.Key, s.Value); err != nil {
			return wrote, err
		}
		wrote = append(wrote, s.Key)
	}
	return wrote, nil
}

// ReadSysctl returns the trimmed value of key (for example
// "net/ipv4/conf/cali0123456789a/proxy_arp") in the calling thread's namespace.
func ReadSysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, key))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// readSysctlFast is ReadSysctl with fewer syscalls and no allocation for
// the value: open, one read into a small buffer, close. Values routelet
// compares are short; a longer one reads as its first bytes, which never
// equals a wanted value.
func readSysctlFast(key string) (string, error) {
	p := procSys + "/" + key
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, &fs.PathError{Op: "open", Path: p, Err: err})
	}
	var buf [32]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, &fs.PathError{Op: "read", Path: p, Err: err})
	}
	return string(bytes.TrimSpace(buf[:max(n, 0)])), nil
}

func writeSysctl(key, val string) error {
	p := filepath.Join(procSys, key)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set sysctl %s=%s: no such setting (interface gone or protocol disabled): %w", key, val, err)
		}
		return fmt.Errorf("set sysctl %s=%s: %w", key, val, err)
	}
	_, werr := f.WriteString(val)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", key, val, err)
	}
	return nil
}
