package main

import (
	"strings"
	"runtime/debug"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// TestCheckOddPrevResult: a prevResult with null entries or the wrong shapes
// is a CNI error naming the problem, never a panic.
func TestCheckOddPrevResult(t *testing.T) {
	for _, ver := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		for name, prev := range map[string]string{
			"null interface": `{"cniVersion":"V","interfaces":[null],"ips":[{"address":"10.90.0.1/32","interface":0}]}`,
			"null ip":        `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[null]}`,
			"null route":     `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.90.0.1/32","interface":0}],"routes":[null]}`,
			"route no dst":   `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.90.0.1/32","interface":0}],"routes":[{}]}`,
			"ip no address":  `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0}]}`,
		} {
			t.Run(ver+"/"+name, func(t *testing.T) {
				useFake(t)
				n, _ := unitNode(t)
				// A live attachment, so that CHECK gets as far as the routes.
				if err := cmdAdd(&skel.CmdArgs{ContainerID: "odd", Netns: "/x", IfName: "eth0", StdinData: n.conf(ver, nil)}); err != nil {
					t.Fatal(err)
				}
				conf := withPrev(t, n.conf(ver, nil), []byte(strings.ReplaceAll(prev, `"V"`, `"`+ver+`"`)))
				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("CHECK panicked: %v\n%s", r, debug.Stack())
						}
					}()
					return cmdCheck(&skel.CmdArgs{ContainerID: "odd", Netns: "/x", IfName: "eth0", StdinData: conf})
				}()
				if err == nil {
					t.Errorf("CHECK accepted prevResult %s", prev)
				}
			})
		}
	}
}
