package ipset

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// hashNetRevision is the hash:net revision sets are created with: 6 (with
// skbinfo support) exists since Linux 3.19, so every supported kernel has it.
const hashNetRevision = 6

// Command-level flags of IPSET_CMD_LIST (enum ipset_cmd_flags).
const listSetNameOnly = 1 << 1

// Netlink is the real Kernel: a minimal codec for the ipset netlink messages
// routelet sends (create, destroy, add, del, swap, rename, list), over one
// netfilter netlink socket bound to a network namespace when it is opened.
//
// It does not use vishvananda/netlink's ipset helpers: v1.3.1 asserts every
// error to syscall.Errno (and so panics on a wrapped extended-ack error or
// an interrupted dump), logs unknown attributes with the standard logger,
// and has no rename; this codec needs none of that and parses dumps without
// a goroutine per attribute. Its socket is an nlutil.Conn: the periodic
// check lists every set each second, and a list then costs a send and the
// receives, nothing more.
type Netlink struct {
	conn *nlutil.Conn
}

var _ Kernel = (*Netlink)(nil)

// NewNetlink opens a Netlink in the calling thread's network namespace.
func NewNetlink() (*Netlink, error) {
	return newNetlinkAt(netns.None())
}

// NewNetlinkAt opens a Netlink whose socket lives in the network namespace
// at nsPath (e.g. /var/run/netns/node1 or /proc/<pid>/ns/net). Later calls
// need no namespace switching: the socket stays bound to that namespace.
func NewNetlinkAt(nsPath string) (*Netlink, error) {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("ipset netlink: open netns %q: %w", nsPath, err)
	}
	defer h.Close()
	return newNetlinkAt(h)
}

func newNetlinkAt(h netns.NsHandle) (*Netlink, error) {
	c, err := nlutil.Dial(unix.NETLINK_NETFILTER, h)
	if err != nil {
		return nil, fmt.Errorf("ipset netlink: %w", err)
	}
	return &Netlink{conn: c}, nil
}

// Close closes the socket.
func (n *Netlink) Close() { n.conn.Close() }

// request starts an ipset message for cmd carrying the protocol attribute.
func (n *Netlink) request(cmd, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	return req
}

// execute sends req and hands each payload of the kernel's answer to each
// (nil: none wanted), with the error translated by kernelErr. An
// interrupted dump is taken again, after start (nil: nothing) has reset
// what each collected (a request is safe to resend: each exchange gets a
// new sequence number).
func (n *Netlink) execute(req *nl.NetlinkRequest, start func(), each func([]byte) error) error {
	_, err := nlutil.Retry(func() (struct{}, error) {
		if start != nil {
			start()
		}
		return struct{}{}, n.conn.Execute(req, each)
	})
	if err != nil {
		return kernelErr(err)
	}
	return nil
}

// kernelErr maps the errno an ipset request failed with to this package's
// sentinels, or to the ipset-specific description for codes ≥ 4096.
func kernelErr(err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch int(errno) {
	case int(unix.ENOENT):
		return ErrNotExist
	case nl.IPSET_ERR_TYPE_MISMATCH:
		return ErrTypeMismatch
	case nl.IPSET_ERR_REFERENCED, nl.IPSET_ERR_BUSY:
		return ErrReferenced
	}
	if int(errno) >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(uintptr(errno))
	}
	return err
}

func setNameAttr(name string) *nl.RtAttr {
	return nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name))
}

// Create makes an empty hash:net set.
func (n *Netlink) Create(name string, family Family, maxElem uint32) error {
	req := n.request(nl.IPSET_CMD_CREATE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	req.AddData(setNameAttr(name))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_TYPENAME, nl.ZeroTerminated(HashNet)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_REVISION, nl.Uint8Attr(hashNetRevision)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FAMILY, nl.Uint8Attr(uint8(family))))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_MAXELEM|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint32Attr(maxElem)))
	req.AddData(data)
	if err := n.execute(req, nil, nil); err != nil {
		return fmt.Errorf("ipset create %q (%s %s): %w", name, HashNet, family, err)
	}
	return nil
}

// Destroy removes a set. Without NLM_F_EXCL current kernels report a missing
// set as success; older ones answer ENOENT, returned as ErrNotExist.
func (n *Netlink) Destroy(name string) error {
	req := n.request(nl.IPSET_CMD_DESTROY, unix.NLM_F_ACK)
	req.AddData(setNameAttr(name))
	if err := n.execute(req, nil, nil); err != nil {
		return fmt.Errorf("ipset destroy %q: %w", name, err)
	}
	return nil
}

// Swap exchanges two sets.
func (n *Netlink) Swap(a, b string) error {
	return n.twoNames(nl.IPSET_CMD_SWAP, "swap", a, b)
}

// Rename renames a set; the new name must be free.
func (n *Netlink) Rename(from, to string) error {
	return n.twoNames(nl.IPSET_CMD_RENAME, "rename", from, to)
}

// twoNames sends a command that names two sets (swap, rename): the second
// name travels in IPSET_ATTR_SETNAME2.
func (n *Netlink) twoNames(cmd int, verb, a, b string) error {
	req := n.request(cmd, unix.NLM_F_ACK)
	req.AddData(setNameAttr(a))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME2, nl.ZeroTerminated(b)))
	if err := n.execute(req, nil, nil); err != nil {
		return fmt.Errorf("ipset %s %q %q: %w", verb, a, b, err)
	}
	return nil
}

// Add puts p into the set. Without NLM_F_EXCL the kernel treats an already
// present member as success.
func (n *Netlink) Add(name string, p netip.Prefix) error {
	if err := n.member(nl.IPSET_CMD_ADD, name, p); err != nil {
		return fmt.Errorf("ipset add %s to %q: %w", p, name, err)
	}
	return nil
}

// Del removes p from the set. Without NLM_F_EXCL the kernel treats an absent
// member as success.
func (n *Netlink) Del(name string, p netip.Prefix) error {
	if err := n.member(nl.IPSET_CMD_DEL, name, p); err != nil {
		return fmt.Errorf("ipset del %s from %q: %w", p, name, err)
	}
	return nil
}

func (n *Netlink) member(cmd int, name string, p netip.Prefix) error {
	if !p.IsValid() || p.Bits() == 0 {
		return fmt.Errorf("member %s: not a hash:net entry (prefix length 1..%d)", p, p.Addr().BitLen())
	}
	req := n.request(cmd, unix.NLM_F_ACK)
	req.AddData(setNameAttr(name))
	ipType := nl.IPSET_ATTR_IPADDR_IPV4
	if p.Addr().Is6() {
		ipType = nl.IPSET_ATTR_IPADDR_IPV6
	}
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	ip := nl.NewRtAttr(nl.IPSET_ATTR_IP|int(nl.NLA_F_NESTED), nil)
	ip.AddChild(nl.NewRtAttr(ipType|int(nl.NLA_F_NET_BYTEORDER), p.Addr().AsSlice()))
	data.AddChild(ip)
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_CIDR, nl.Uint8Attr(uint8(p.Bits()))))
	req.AddData(data)
	return n.execute(req, nil, nil)
}

// List dumps one set with its members.
func (n *Netlink) List(name string) (Info, error) {
	req := n.request(nl.IPSET_CMD_LIST, unix.NLM_F_ACK|unix.NLM_F_DUMP)
	req.AddData(setNameAttr(name))
	var info Info
	err := n.execute(req, func() { info = Info{Name: name} }, func(m []byte) error { return parseListMsg(m, &info) })
	if err != nil {
		return Info{}, fmt.Errorf("ipset list %q: %w", name, err)
	}
	return info, nil
}

// ListNames returns the name of every set in the namespace.
func (n *Netlink) ListNames() ([]string, error) {
	req := n.request(nl.IPSET_CMD_LIST, unix.NLM_F_ACK|unix.NLM_F_DUMP)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FLAGS, nl.BEUint32Attr(listSetNameOnly)))
	var names []string
	var seen map[string]bool
	start := func() { names, seen = nil, map[string]bool{} }
	err := n.execute(req, start, func(m []byte) error {
		if len(m) < 4 {
			return nil
		}
		for _, a := range parseAttrs(m[4:]) {
			if a.typ == nl.IPSET_ATTR_SETNAME {
				if name := nlutil.CString(a.val); !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ipset list names: %w", err)
	}
	return names, nil
}

// attr is one netlink attribute with the NESTED and NET_BYTEORDER flag bits
// stripped from its type.
type attr struct {
	typ int
	val []byte
}

// parseAttrs splits b into attributes; a truncated tail is ignored.
func parseAttrs(b []byte) []attr {
	var out []attr
	nlutil.EachAttr(b, func(typ uint16, v []byte) { out = append(out, attr{typ: int(typ), val: v}) })
	return out
}

// parseListMsg merges one LIST answer into info. Large sets come in several
// messages; only the first carries the type and family, each carries a
// share of the members. Messages about another set are ignored.
func parseListMsg(m []byte, info *Info) error {
	if len(m) < 4 {
		return fmt.Errorf("short message (%d bytes)", len(m))
	}
	attrs := parseAttrs(m[4:])
	for _, a := range attrs {
		if a.typ == nl.IPSET_ATTR_SETNAME && nlutil.CString(a.val) != info.Name {
			return nil
		}
	}
	for _, a := range attrs {
		switch a.typ {
		case nl.IPSET_ATTR_TYPENAME:
			info.Type = nlutil.CString(a.val)
		case nl.IPSET_ATTR_FAMILY:
			if len(a.val) > 0 {
				info.Family = Family(a.val[0])
			}
		case nl.IPSET_ATTR_ADT:
			for _, e := range parseAttrs(a.val) {
				if e.typ != nl.IPSET_ATTR_DATA {
					continue
				}
				p, err := parseEntry(e.val)
				if err != nil {
					return err
				}
				info.Members = append(info.Members, p)
			}
		}
	}
	return nil
}

// parseEntry decodes one hash:net member (address and prefix length).
func parseEntry(b []byte) (netip.Prefix, error) {
	var addr netip.Addr
	bits := -1
	for _, a := range parseAttrs(b) {
		switch a.typ {
		case nl.IPSET_ATTR_IP:
			for _, ip := range parseAttrs(a.val) {
				if a, ok := netip.AddrFromSlice(ip.val); ok {
					addr = a
				}
			}
		case nl.IPSET_ATTR_CIDR:
			if len(a.val) > 0 {
				bits = int(a.val[0])
			}
		}
	}
	if !addr.IsValid() {
		return netip.Prefix{}, errors.New("member without an address")
	}
	if bits < 0 {
		bits = addr.BitLen()
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("member %s/%d: %w", addr, bits, err)
	}
	return p, nil
}
