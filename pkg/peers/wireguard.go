package peers

import "golang.zx2c4.com/wireguard/wgctrl/wgtypes"

// WireGuardPeer is what a node's record says of its WireGuard device: its
// public key (zero: none, or refused) and listen port.
type WireGuardPeer struct {
	PublicKey wgtypes.Key
	Port      uint16
}
