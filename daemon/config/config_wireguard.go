package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	devdefaults "github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/overlay"
)

// Encryption of pod traffic between nodes (encryption).
const (
	EncryptionNone      = "none"
	EncryptionWireGuard = "wireguard"
)

// WireGuard implementations (wireguard-implementation).
const (
	// WireGuardAuto is the kernel's WireGuard when it has one, else the
	// userspace datapath.
	WireGuardAuto      = "auto"
	WireGuardKernel    = "kernel"
	WireGuardUserspace = "userspace"
)

// WireGuard is the WireGuard device's configuration, used when Encryption
// is EncryptionWireGuard.
type WireGuard struct {
	Port           int    // wireguard-port: UDP listen port, published in this node's record
	Device         string // wireguard-device: the device carrying pod traffic between nodes
	Implementation string // wireguard-implementation: auto | kernel | userspace
}

// Encrypted reports whether pod traffic between nodes goes through
// WireGuard.
func (c *Config) Encrypted() bool { return c.Encryption == EncryptionWireGuard }

// wireguardKeys are the encryption keys.
func wireguardKeys() []key {
	return []key{
		{name: "encryption", help: "encryption of pod traffic between nodes: none | wireguard (all of it through the WireGuard device, in every encapsulation mode)",
			def: []string{EncryptionNone}, set: func(c *Config, v []string) error {
				return oneOf(&c.Encryption, strings.ToLower(v[0]), EncryptionNone, EncryptionWireGuard)
			}},
		{name: "wireguard-port", help: "WireGuard UDP listen port (encryption wireguard)", def: []string{strconv.Itoa(devdefaults.WireGuardPort)}, set: func(c *Config, v []string) error {
			return parseInt(&c.WireGuard.Port, v[0], 1, 65535)
		}},
		{name: "wireguard-device", help: "WireGuard device name (encryption wireguard)", def: []string{devdefaults.DeviceWireGuard}, set: func(c *Config, v []string) error {
			if err := validateIfName(v[0]); err != nil {
				return err
			}
			c.WireGuard.Device = v[0]
			return nil
		}},
		{name: "wireguard-implementation", help: "WireGuard datapath: auto (the kernel's if it has one, else userspace) | kernel | userspace",
			def: []string{WireGuardAuto}, set: func(c *Config, v []string) error {
				return oneOf(&c.WireGuard.Implementation, strings.ToLower(v[0]), WireGuardAuto, WireGuardKernel, WireGuardUserspace)
			}},
	}
}

// checkWireGuard refuses, when encryption is on, a WireGuard device name
// another of routelet's links has or may get: an overlay device's, or one
// starting with the pod veth prefix.
func (c *Config) checkWireGuard() error {
	if !c.Encrypted() {
		return nil
	}
	dev := c.WireGuard.Device
	if slices.Contains(overlay.Devices{VXLAN: c.VXLANDevice}.Names(), dev) {
		return c.KeyError("wireguard-device", dev, fmt.Errorf("%s is an overlay device's name", dev))
	}
	if strings.HasPrefix(dev, c.IfacePrefix) {
		return c.KeyError("wireguard-device", dev, fmt.Errorf("%s starts with the pod veth prefix %q (interface-prefix)", dev, c.IfacePrefix))
	}
	return nil
}
