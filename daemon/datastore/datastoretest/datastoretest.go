// Package datastoretest has what the datastores' tests share.
package datastoretest

import "github.com/routelet/routelet/pkg/peers"

// Names returns the records' names, in order.
func Names(recs []peers.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Name)
	}
	return out
}
