// Package buildinfo is the version both binaries report (`routeletd
// version`, the plugin's about line when run without CNI_COMMAND, the
// daemon's log, status and Kubernetes user agent, and the
// routelet_build_info metric).
//
// A release build stamps it at link time: `make build` and `make release`
// pass LDFlag(VERSION), where VERSION is `git describe --tags --match
// 'v*' --dirty` (v0.1.0 on the tag, v0.1.0-3-g1234abcd-dirty three
// commits and local changes past it), and RevisionLDFlag(`git rev-parse
// HEAD`). A build without a version stamp reports "dev-<commit>", the
// commit from that stamp or from the Go toolchain's VCS stamp (absent
// with -buildvcs=false), or "dev" where there is neither.
package buildinfo

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"sync"
)

// version and revision are set by the linker; see LDFlag and
// RevisionLDFlag.
var version, revision string

// pkg is this package's linker name.
const pkg = "github.com/routelet/routelet/internal/buildinfo"

// LDFlag is the -ldflags argument that stamps version v into a binary.
func LDFlag(v string) string { return "-X " + pkg + ".version=" + v }

// RevisionLDFlag is the -ldflags argument that stamps commit rev (40 hex
// digits) into a binary.
func RevisionLDFlag(rev string) string { return "-X " + pkg + ".revision=" + rev }

// commit is what a revision stamp may hold. Both patterns are compiled
// on first use, not at every start of the plugin.
var commit = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{40}$`) })

// stamp is what a stamp may hold: a v-tag as git describe prints it.
var stamp = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
})

// Valid says why v cannot be a stamped version, or nil.
func Valid(v string) error {
	if !stamp().MatchString(v) {
		return fmt.Errorf("version %q: want a tag of the form vMAJOR.MINOR.PATCH with an optional -suffix (git describe --tags)", v)
	}
	return nil
}

// Version is the stamped version, else "dev-<12 hex digits of the
// commit>" (with "-dirty" for a modified tree), else "dev". A stamp that
// is no version (a mistyped -X) reads as "dev-invalid", so no binary
// claims a release it is not.
func Version() string {
	if version != "" {
		if Valid(version) != nil {
			return "dev-invalid"
		}
		return version
	}
	rev, dirty := vcs()
	if len(rev) < 12 {
		return "dev"
	}
	v := "dev-" + rev[:12]
	if dirty {
		v += "-dirty"
	}
	return v
}

// Revision is the commit the binary was built from, as the Go toolchain
// or RevisionLDFlag stamped it, or "" where neither did.
func Revision() string {
	rev, _ := vcs()
	return rev
}

// GoVersion is the Go release that built the binary.
func GoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return ""
}

// vcs is the toolchain's VCS stamp, else the linked revision (dirty
// unknown, so false).
func vcs() (rev string, dirty bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return linked(), false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return linked(), false
	}
	return rev, dirty
}

// linked is the revision stamp when it is a commit, else "".
func linked() string {
	if commit().MatchString(revision) {
		return revision
	}
	return ""
}
