package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
)

// DatastoreEtcd is the etcd datastore (daemon/datastore/etcd).
const DatastoreEtcd = "etcd"

// DefaultEtcdPrefix is the key prefix routelet writes under by default.
const DefaultEtcdPrefix = "/routelet"

// Etcd is the etcd datastore's connection: where etcd is, how to
// authenticate, and the key prefix.
type Etcd struct {
	Endpoints []string // etcd-endpoints: client URLs (http:// or https://)
	CAFile    string   // etcd-ca-file: CA verifying etcd's serving certificate
	CertFile  string   // etcd-cert-file: client certificate
	KeyFile   string   // etcd-key-file: client certificate's key
	Prefix    string   // etcd-prefix: every key routelet reads and writes is under it
}

// TLS reports whether any TLS file is configured.
func (e Etcd) TLS() bool { return e.CAFile != "" || e.CertFile != "" || e.KeyFile != "" }

// etcdKeys are the etcd datastore's keys. Each also answers to the names
// etcdctl and Calico read from the environment.
func etcdKeys() []key {
	file := func(dst func(c *Config) *string) func(c *Config, v []string) error {
		return func(c *Config, v []string) error {
			if v[0] != "" && !strings.HasPrefix(v[0], "/") {
				return errors.New("must be an absolute path")
			}
			*dst(c) = v[0]
			return nil
		}
	}
	return []key{
		{name: "etcd-endpoints", help: "etcd client URLs (datastore etcd); repeatable, comma-separated in env", list: true,
			envAliases: []string{"ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS"}, set: func(c *Config, v []string) error {
				c.Etcd.Endpoints = nil
				for _, s := range v {
					u, err := parseEndpoint(s)
					if err != nil {
						return fmt.Errorf("endpoint %q: %w", s, err)
					}
					c.Etcd.Endpoints = append(c.Etcd.Endpoints, u)
				}
				return nil
			}},
		{name: "etcd-ca-file", help: "CA file verifying etcd's certificate", def: []string{""},
			envAliases: []string{"ETCD_CA_CERT_FILE", "ETCDCTL_CACERT"}, set: file(func(c *Config) *string { return &c.Etcd.CAFile })},
		{name: "etcd-cert-file", help: "client certificate file for etcd", def: []string{""},
			envAliases: []string{"ETCD_CERT_FILE", "ETCDCTL_CERT"}, set: file(func(c *Config) *string { return &c.Etcd.CertFile })},
		{name: "etcd-key-file", help: "client certificate's key file for etcd", def: []string{""},
			envAliases: []string{"ETCD_KEY_FILE", "ETCDCTL_KEY"}, set: file(func(c *Config) *string { return &c.Etcd.KeyFile })},
		{name: "etcd-prefix", help: "etcd key prefix routelet reads and writes under", def: []string{DefaultEtcdPrefix}, set: func(c *Config, v []string) error {
			p := v[0]
			if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
				return errors.New(`must be a clean absolute key path other than "/", e.g. /routelet`)
			}
			c.Etcd.Prefix = p
			return nil
		}},
	}
}

// parseEndpoint accepts http://host:port, https://host:port or host:port
// (taken as http, or https once TLS files are set: see CheckEtcd).
func parseEndpoint(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return "", errors.New("must be http(s)://HOST:PORT or HOST:PORT")
		}
		return s, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
		return "", errors.New("must be http(s)://HOST:PORT")
	}
	return u.Scheme + "://" + u.Host, nil
}

// CheckEtcd checks the etcd keys together, for datastore etcd: at least
// one endpoint, a client certificate and its key given both or neither,
// and no plain http:// endpoint once TLS files are set.
func (c *Config) CheckEtcd() error {
	e := c.Etcd
	if len(e.Endpoints) == 0 {
		return c.KeyError("etcd-endpoints", "", errors.New("datastore etcd needs at least one endpoint"))
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		return c.KeyError("etcd-cert-file", e.CertFile, errors.New("etcd-cert-file and etcd-key-file go together"))
	}
	if e.TLS() {
		for _, u := range e.Endpoints {
			if strings.HasPrefix(u, "http://") {
				return c.KeyError("etcd-endpoints", u, errors.New("plain http endpoint while TLS files are set: use https://"))
			}
		}
	}
	return nil
}
