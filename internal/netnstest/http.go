package netnstest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// HTTPGet fetches url from inside n (the connection is dialled on a thread
// in n, e.g. to reach routeletd's health server on the node's loopback) and
// returns the status code and body.
func HTTPGet(n ns.NetNS, url string) (int, string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := n.Do(func(ns.NetNS) error {
			var err error
			conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// MetricValue returns the value of the sample named name (with its labels,
// e.g. `routelet_routes_programmed{table="ipv4"}`) in a Prometheus text
// exposition; ok is false when body has no such sample.
func MetricValue(body, name string) (value string, ok bool) {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v, true
		}
	}
	return "", false
}
