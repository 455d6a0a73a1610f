package wireguard

import (
	"errors"
	"fmt"
	"os"

	"golang.zx2c4.com/wireguard/wgctrl"
)

// ReadDevice reads the WireGuard device name through wgctrl in the calling
// process's network namespace (the kernel's device, or a userspace
// datapath's socket in SocketDir): its public key, listen port and peers.
// Name, Impl, Up and MTU are left for the caller, who has the link; the
// private key is not kept. A device that does not answer is an error
// matching os.ErrNotExist.
func ReadDevice(name string) (Status, error) {
	if err := checkName(name); err != nil {
		return Status{}, err
	}
	c, err := wgctrl.New()
	if err != nil {
		return Status{}, fmt.Errorf("wireguard device %s: open wgctrl: %w", name, err)
	}
	defer c.Close()
	dev, err := c.Device(name)
	if errors.Is(err, os.ErrNotExist) {
		return Status{}, fmt.Errorf("no WireGuard device %s answers: %w", name, err)
	}
	if err != nil {
		return Status{}, fmt.Errorf("read WireGuard device %s: %w", name, err)
	}
	s := Status{Name: name, PublicKey: dev.PublicKey, Port: dev.ListenPort}
	for i := range dev.Peers {
		p := &dev.Peers[i]
		s.Peers = append(s.Peers, PeerStatus{
			PublicKey: p.PublicKey, Endpoint: peerEndpoint(p), AllowedIPs: peerAllowed(p),
			LastHandshake: p.LastHandshakeTime, RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes,
		})
	}
	return s, nil
}

// IsDatapath reports whether process pid runs (not a zombie) with the
// userspace datapath's command line for device name
// (`… wireguard-datapath --device NAME …`).
func IsDatapath(pid int, name string) bool { return pid > 0 && isDatapath(pid, name) }
