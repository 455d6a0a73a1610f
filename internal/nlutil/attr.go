package nlutil

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// EachAttr calls f with the type (NLA_F_NESTED and NLA_F_NET_BYTEORDER
// masked off) and value of each netlink attribute in b, stopping at the
// first malformed one; a truncated tail is ignored.
func EachAttr(b []byte, f func(typ uint16, v []byte)) {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			return
		}
		f(binary.NativeEndian.Uint16(b[2:4])&attrTypeMask, b[unix.SizeofRtAttr:l])
		al := (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
		if al > len(b) {
			return
		}
		b = b[al:]
	}
}

// attrTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from a type.
const attrTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// CString is a NUL-terminated attribute value as a string (all of b when
// it holds no NUL).
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
