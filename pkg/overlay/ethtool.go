package overlay

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolCmdValue mirrors struct ethtool_value (linux/ethtool.h).
type ethtoolCmdValue struct {
	cmd  uint32
	data uint32
}

// ifreqData mirrors struct ifreq with ifr_data, padded to the kernel's 40
// bytes on 64-bit (16 name + 24 union).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolValue issues one SIOCETHTOOL request carrying an ethtool_value
// (a get or a set command) on fd and returns the value the kernel left in it.
// The data pointer is an unsafe.Pointer field, so the GC keeps the value
// alive and in place for the duration of the call.
func ethtoolValue(fd int, name string, cmd, data uint32) (uint32, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("interface name %q: must be 1..%d bytes", name, unix.IFNAMSIZ-1)
	}
	v := &ethtoolCmdValue{cmd: cmd, data: data}
	req := &ifreqData{data: unsafe.Pointer(v)}
	copy(req.name[:], name)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req)))
	if errno != 0 {
		return 0, errno
	}
	return v.data, nil
}
