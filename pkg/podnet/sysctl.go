package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// procSys is where sysctls live. /proc/sys/net shows the network namespace of
// the thread that opens the file, which is why callers pin their thread.
const procSys = "/proc/sys"

// hostSysctls makes the host side of a pod veth a router port: it answers ARP
// for the pod's gateway (proxy_arp, without the default random delay),
// forwards, and never autoconfigures from a router advertisement a pod sends.
// With an IPv6 pod it also enables proxy NDP and forwarding for IPv6 and turns
// off duplicate address detection (the gateway address is NODAD anyway).
func hostSysctls(iface string, ipv6 bool) error {
	settings := []struct{ key, val string }{
		{"net/ipv4/conf/" + iface + "/proxy_arp", "1"},
		{"net/ipv4/neigh/" + iface + "/proxy_delay", "0"},
		{"net/ipv4/conf/" + iface + "/forwarding", "1"},
	}
	if ipv6 {
		settings = append(settings,
			struct{ key, val string }{"net/ipv6/conf/" + iface + "/accept_ra", "0"},
			struct{ key, val string }{"net/ipv6/conf/" + iface + "/accept_dad", "0"},
			struct{ key, val string }{"net/ipv6/conf/" + iface + "/proxy_ndp", "1"},
			struct{ key, val string }{"net/ipv6/conf/" + iface + "/forwarding", "1"},
		)
	} else if _, err := os.Stat(filepath.Join(procSys, "net/ipv6/conf", iface)); err == nil {
		// IPv4-only pod on an IPv6-capable host: still refuse router
		// advertisements from the pod.
		settings = append(settings, struct{ key, val string }{"net/ipv6/conf/" + iface + "/accept_ra", "0"})
	}
	for _, s := range settings {
		if err := writeSysctl(s.key, s.val); err != nil {
			return err
		}
	}
	return nil
}

// EnableForwarding turns on IPv4 (and, when ipv6, IPv6) forwarding in the
// calling thread's network namespace, writing only when the value is not
// already 1: concurrent ADDs then never rewrite a setting, and a node that
// forwards already sees no change. IPv6 forwarding is only touched for IPv6
// pods, because turning it on makes the kernel ignore router advertisements
// on every interface.
func EnableForwarding(ipv6 bool) error {
	keys := []string{"net/ipv4/ip_forward"}
	if ipv6 {
		keys = append(keys, "net/ipv6/conf/all/forwarding")
	}
	for _, k := range keys {
		cur, err := ReadSysctl(k)
		if err != nil {
			return err
		}
		if cur == "1" {
			continue
		}
		if err := writeSysctl(k, "1"); err != nil {
			return err
		}
	}
	return nil
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
