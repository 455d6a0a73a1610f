package netnstest

import (
	"context"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
)

// IPSetMembers returns the members of the ipset name inside n as
// `ipset list` prints them (host entries without their prefix length,
// options such as a timeout left out), sorted. It fails when the set cannot
// be listed, for instance because it does not exist.
func IPSetMembers(n ns.NetNS, name string) ([]string, error) {
	out, err := Exec(context.Background(), n, "ipset", "list", name)
	if err != nil {
		return nil, err
	}
	_, after, _ := strings.Cut(out, "Members:\n")
	var members []string
	for _, l := range strings.Split(after, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			members = append(members, f[0])
		}
	}
	slices.Sort(members)
	return members, nil
}
