package routes

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// KernelType returns the rtm_type the kernel stores a route of type t as
// (RTN_UNICAST for link and gateway routes).
func (t TargetType) KernelType() int { return t.kernelType() }

// RTMTypeName names an rtm_type like iproute2 ("unicast", "blackhole",
// …; "type<N>" for others).
func RTMTypeName(t int) string {
	switch t {
	case unix.RTN_UNICAST:
		return "unicast"
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibit"
	case unix.RTN_THROW:
		return "throw"
	}
	return fmt.Sprintf("type%d", t)
}
