package main

import (
	"fmt"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// ETHTOOL_SGRO (linux/ethtool.h): set generic receive offload.
const ethtoolSGRO = 0x0000002c

// ethtoolValue mirrors struct ethtool_value.
type ethtoolValue struct{ cmd, data uint32 }

// ifreqData mirrors struct ifreq carrying ifr_data (40 bytes on 64-bit).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// setGRO switches generic receive offload on (as `ethtool -K ifname gro on`)
// for ifname inside n. On a veth this turns on NAPI, so received packets —
// VXLAN ones included — are aggregated as a physical NIC's driver would.
func setGRO(n ns.NetNS, ifname string) error {
	return n.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		v := &ethtoolValue{cmd: ethtoolSGRO, data: 1}
		req := &ifreqData{data: unsafe.Pointer(v)}
		copy(req.name[:], ifname)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req))); errno != 0 {
			return fmt.Errorf("gro on %s: %w", ifname, errno)
		}
		return nil
	})
}
