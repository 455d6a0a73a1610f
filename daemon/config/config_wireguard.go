package config

import (
	"fmt"
	"strconv"
	"strings"

	rldefaults "github.com/routelet/routelet/pkg/defaults"
)

// Values of key encryption.
const (
	EncryptionNone      = "none"
	EncryptionWireGuard = "wireguard"
)

// Values of key wireguard-implementation.
const (
	WireGuardAuto      = "auto"
	WireGuardKernel    = "kernel"
	WireGuardUserspace = "userspace"
)

// wireGuardKeys are the keys of the encryption of pod traffic between
// nodes: whether it is on, and the WireGuard device's port, name and
// implementation.
func wireGuardKeys() []key {
	return []key{
		{name: "encryption", help: "pod traffic between nodes: none | wireguard (every peer's pods only through the WireGuard device, in every encapsulation mode)", def: []string{EncryptionNone}, set: func(c *Config, v []string) error {
			return oneOf(&c.Encryption, strings.ToLower(v[0]), EncryptionNone, EncryptionWireGuard)
		}},
		{name: "wireguard-port", help: "WireGuard UDP listen port", def: []string{strconv.Itoa(rldefaults.WireGuardPort)}, set: func(c *Config, v []string) error {
			return parseInt(&c.WireGuardPort, v[0], 1, 65535)
		}},
		{name: "wireguard-device", help: "WireGuard device name", def: []string{rldefaults.DeviceWireGuard}, set: func(c *Config, v []string) error {
			n := v[0]
			if err := validateIfName(n); err != nil {
				return err
			}
			if strings.HasPrefix(n, rldefaults.VethPrefix) {
				return fmt.Errorf("starts with the pod veth prefix %q", rldefaults.VethPrefix)
			}
			for _, o := range []string{rldefaults.DeviceVXLAN, rldefaults.DeviceVXLANv6, rldefaults.DeviceIPIP} {
				if n == o {
					return fmt.Errorf("is the overlay device %q", o)
				}
			}
			c.WireGuardDevice = n
			return nil
		}},
		{name: "wireguard-implementation", help: "WireGuard implementation: auto (the kernel's where it has one, else userspace) | kernel | userspace", def: []string{WireGuardAuto}, set: func(c *Config, v []string) error {
			return oneOf(&c.WireGuardImplementation, strings.ToLower(v[0]), WireGuardAuto, WireGuardKernel, WireGuardUserspace)
		}},
	}
}
