package nlutil

import (
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MainRoutes dumps the main table's routes of IP family v (4 or 6)
// through h, taken again while the kernel interrupts the dump (Retry).
func MainRoutes(h *netlink.Handle, v int) ([]netlink.Route, error) {
	fam := netlink.FAMILY_V4
	if v == 6 {
		fam = netlink.FAMILY_V6
	}
	return Retry(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
}
