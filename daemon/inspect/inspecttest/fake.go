package inspecttest

import (
	"fmt"
	"net/netip"

	"github.com/routelet/routelet/daemon/inspect"
)

var _ inspect.Reader = (*Fake)(nil)

// Fake is an inspect.Reader over fixed contents.
type Fake struct {
	LinkList  []inspect.Link
	RouteList [2][]inspect.Route      // by family index: 0 IPv4, 1 IPv6
	NeighList map[int][]inspect.Neigh // by link index
	FDBList   map[int][]inspect.FDBEntry
	SetList   map[string][]netip.Prefix
	// Sysctls are the keys that read; every other key does not exist.
	Sysctls map[string]string
	// PodLinks are the pods' links by "netnsPath/ifName".
	PodLinks map[string]inspect.Link
}

// Links implements inspect.Reader.
func (f *Fake) Links() ([]inspect.Link, error) { return f.LinkList, nil }

// Routes implements inspect.Reader.
func (f *Fake) Routes(v int) ([]inspect.Route, error) {
	if v == 6 {
		return f.RouteList[1], nil
	}
	return f.RouteList[0], nil
}

// Neighs implements inspect.Reader.
func (f *Fake) Neighs(index, _ int) ([]inspect.Neigh, error) { return f.NeighList[index], nil }

// FDB implements inspect.Reader.
func (f *Fake) FDB(index int) ([]inspect.FDBEntry, error) { return f.FDBList[index], nil }

// SetMembers implements inspect.Reader.
func (f *Fake) SetMembers(name string) ([]netip.Prefix, bool, error) {
	m, ok := f.SetList[name]
	return m, ok, nil
}

// Sysctl implements inspect.Reader.
func (f *Fake) Sysctl(key string) (string, error) {
	if v, ok := f.Sysctls[key]; ok {
		return v, nil
	}
	return "", fmt.Errorf("sysctl %s: %w", key, inspect.ErrNotExist)
}

// PodLink implements inspect.Reader.
func (f *Fake) PodLink(netnsPath, ifName string) (inspect.Link, error) {
	if l, ok := f.PodLinks[netnsPath+"/"+ifName]; ok {
		return l, nil
	}
	return inspect.Link{}, fmt.Errorf("link %s in netns %s: %w", ifName, netnsPath, inspect.ErrNotExist)
}
