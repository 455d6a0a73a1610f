package config

import (
	"errors"
	"strings"
)

// DefaultCNIConfName is the file routeletd writes into cni-conf-dir: "10-"
// sorts it before most other networks' files, and runtimes use the first
// file in name order.
const DefaultCNIConfName = "10-routelet.conflist"

// cniKeys are the keys of the CNI config lifecycle: where routeletd writes
// the conflist once it is ready, from which template, under which name.
func cniKeys() []key {
	return []key{
		{name: "cni-conf-dir", help: "write the conflist into this directory (the runtime's CNI conf dir) once ready; empty: write none", def: []string{""}, set: func(c *Config, v []string) error {
			if v[0] != "" && !strings.HasPrefix(v[0], "/") {
				return errors.New("must be empty or an absolute path")
			}
			c.CNIConfDir = v[0]
			return nil
		}},
		{name: "cni-conf-template", help: "conflist template file (routelet first; routeletd fills in mtu, stateDir and interfacePrefix); empty: the built-in one, routelet and portmap", def: []string{""}, set: func(c *Config, v []string) error {
			if v[0] != "" && !strings.HasPrefix(v[0], "/") {
				return errors.New("must be empty or an absolute path")
			}
			c.CNIConfTemplate = v[0]
			return nil
		}},
		{name: "cni-conf-name", help: "file name of the conflist in cni-conf-dir", def: []string{DefaultCNIConfName}, set: func(c *Config, v []string) error {
			n := v[0]
			if n == "" || strings.HasPrefix(n, ".") || strings.ContainsAny(n, "/\x00") || len(n) > 200 || !strings.HasSuffix(n, ".conflist") {
				return errors.New(`must be a file name ending in ".conflist", not starting with "." (at most 200 bytes, no "/")`)
			}
			c.CNIConfName = n
			return nil
		}},
	}
}
