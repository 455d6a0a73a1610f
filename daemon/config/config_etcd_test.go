package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/datastore/etcd"
)

// Etcd converts to the etcd datastore's Conn: routeletd hands it over
// that way, so the two keep the same fields.
var _ = etcd.Conn(Etcd{})

// TestEtcdPrefixDefault: the etcd-prefix default is the etcd datastore's.
func TestEtcdPrefixDefault(t *testing.T) {
	if DefaultEtcdPrefix != etcd.DefaultPrefix {
		t.Errorf("etcd-prefix default %q, the etcd datastore's %q", DefaultEtcdPrefix, etcd.DefaultPrefix)
	}
}

// check is one of TestEveryKey's checks: was the good value applied.
type check func(c *Config) bool

// etcdKeyCases are TestEveryKey's cases for the etcd keys.
var etcdKeyCases = []struct {
	key  string
	good string
	ok   check
	bad  string
}{
	{"etcd-endpoints", "https://10.0.0.1:2379", func(c *Config) bool {
		return slices.Equal(c.Etcd.Endpoints, []string{"https://10.0.0.1:2379"})
	}, "ftp://10.0.0.1:2379"},
	{"etcd-ca-file", "/etc/routelet/etcd-ca.crt", func(c *Config) bool { return c.Etcd.CAFile == "/etc/routelet/etcd-ca.crt" }, "ca.crt"},
	{"etcd-cert-file", "/etc/routelet/etcd.crt", func(c *Config) bool { return c.Etcd.CertFile == "/etc/routelet/etcd.crt" }, "etcd.crt"},
	{"etcd-key-file", "/etc/routelet/etcd.key", func(c *Config) bool { return c.Etcd.KeyFile == "/etc/routelet/etcd.key" }, "etcd.key"},
	{"etcd-prefix", "/clusters/a", func(c *Config) bool { return c.Etcd.Prefix == "/clusters/a" }, "/a/../b"},
}

// TestEtcdEnvAliases: etcdctl's and Calico's variable names set the etcd
// keys when ROUTELET_* is unset, and ROUTELET_* wins over them.
func TestEtcdEnvAliases(t *testing.T) {
	c, err := load(t, []string{"--node-name=n1"}, map[string]string{
		"ETCDCTL_ENDPOINTS": "https://a:2379,https://b:2379", "ETCDCTL_CACERT": "/ca", "ETCD_CERT_FILE": "/crt", "ETCDCTL_KEY": "/key",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Etcd.Endpoints, []string{"https://a:2379", "https://b:2379"}) || c.Etcd.CAFile != "/ca" || c.Etcd.CertFile != "/crt" || c.Etcd.KeyFile != "/key" {
		t.Errorf("aliases not applied: %+v", c.Etcd)
	}
	if c.Etcd.Prefix != DefaultEtcdPrefix {
		t.Errorf("prefix %q, want the default %q", c.Etcd.Prefix, DefaultEtcdPrefix)
	}
	c, err = load(t, []string{"--node-name=n1"}, map[string]string{"ETCD_ENDPOINTS": "http://a:2379", "ROUTELET_ETCD_ENDPOINTS": "http://b:2379"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Etcd.Endpoints, []string{"http://b:2379"}) {
		t.Errorf("endpoints %v, want ROUTELET_ETCD_ENDPOINTS's", c.Etcd.Endpoints)
	}
}

// TestCheckEtcd: the etcd keys are refused together when they cannot work,
// naming the key; with datastore etcd already by Load.
func TestCheckEtcd(t *testing.T) {
	_, err := load(t, []string{"--node-name=n1", "--datastore=etcd"}, nil, nil)
	if ce := (*Error)(nil); !errors.As(err, &ce) || ce.Key != "etcd-endpoints" {
		t.Errorf("datastore etcd without endpoints: %v, want an error naming etcd-endpoints", err)
	}
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--etcd-endpoints=https://a:2379", "--etcd-cert-file=/crt"}, "etcd-cert-file"},
		{[]string{"--etcd-endpoints=http://a:2379", "--etcd-ca-file=/ca"}, "etcd-endpoints"},
	} {
		c, err := load(t, append([]string{"--node-name=n1"}, tc.args...), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = c.CheckEtcd()
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%v: CheckEtcd = %v, want an error naming %s", tc.args, err, tc.key)
		}
	}
	c, err := load(t, []string{"--node-name=n1", "--etcd-endpoints=10.0.0.1:2379,https://10.0.0.2:2379"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckEtcd(); err != nil {
		t.Errorf("CheckEtcd: %v", err)
	}
	if _, err := load(t, []string{"--node-name=n1", "--etcd-endpoints=https://a:2379/v3"}, nil, nil); err == nil || !strings.Contains(err.Error(), "/v3") {
		t.Errorf("endpoint with a path: %v, want an error naming it", err)
	}
}
