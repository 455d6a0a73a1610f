package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion: VERSION lists the supported spec versions.
func TestVersion(t *testing.T) {
	cmd := exec.Command(filepath.Join(pluginDir(t), "routelet"))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("VERSION: %v", err)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("VERSION output %s: %v", out, err)
	}
	if strings.Join(v.SupportedVersions, ",") != "0.3.1,0.4.0,1.0.0,1.1.0" {
		t.Errorf("supportedVersions = %v", v.SupportedVersions)
	}
}
