package main

import (
	"slices"
	"strings"
	"testing"
)

// TestParseStaging takes only kubernetes' ./staging/ replaces, in the
// form its go.mod uses.
func TestParseStaging(t *testing.T) {
	gomod := `module k8s.io/kubernetes

require (
	k8s.io/api v0.0.0
	github.com/foo/bar v1.2.3
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/other => k8s.io/other v1.0.0
	github.com/x/y => ./staging/src/github.com/x/y
)
`
	got, err := parseStaging(strings.NewReader(gomod))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k8s.io/api", "k8s.io/client-go"}; !slices.Equal(got, want) {
		t.Errorf("staging modules = %v, want %v", got, want)
	}
}

// TestKubeLdflags sets the version kube-apiserver reports.
func TestKubeLdflags(t *testing.T) {
	f := kubeLdflags("v1.37.2")
	for _, want := range []string{"k8s.io/component-base/version.gitVersion=v1.37.2", "k8s.io/component-base/version.gitMinor=37", "k8s.io/client-go/pkg/version.gitMajor=1"} {
		if !strings.Contains(f, want) {
			t.Errorf("ldflags %q lack %q", f, want)
		}
	}
}
