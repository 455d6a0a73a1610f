package image

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestPrivilegedBuiltImageRuns reads the tarball `make image` wrote, checks
// it holds routeletd, the plugins, the installer and every userland program
// routelet runs, then unpacks it and runs each of them chrooted into it, so
// the Debian libraries the programs load are all there.
func TestPrivilegedBuiltImageRuns(t *testing.T) {
	p := builtImage(t)
	cf, fsys := readImage(t, p, "routelet:latest")
	if !slices.Equal(cf.Config.Entrypoint, []string{Routeletd}) {
		t.Errorf("entrypoint %v, want [%s]", cf.Config.Entrypoint, Routeletd)
	}
	want := []string{Routeletd, Installer}
	for _, pl := range Plugins {
		want = append(want, path.Join(PluginDir, pl))
	}
	for _, prog := range Userland {
		found := ""
		for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
			if _, e, ok := resolve(fsys, path.Join(dir, prog)); ok && e.mode.Perm()&0o111 != 0 {
				found = path.Join(dir, prog)
				break
			}
		}
		if found == "" {
			t.Errorf("userland program %s not on the image's PATH", prog)
		}
	}
	for _, w := range want {
		if _, e, ok := resolve(fsys, w); !ok || e.mode.Perm()&0o111 == 0 {
			t.Errorf("%s missing or not executable in the image", w)
		}
	}
	if t.Failed() {
		return
	}
	netnstest.SkipUnlessRoot(t, "runs the image's programs chrooted into its unpacked filesystem")
	dir := t.TempDir()
	untar := exec.Command("tar", "-x", "-C", dir)
	tag, _ := name.NewTag("routelet:latest")
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	untar.Stdin = rc
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("unpack image: %v\n%s", err, out)
	}
	runs := [][]string{
		{"iptables", "--version"}, {"ip6tables", "--version"}, {"iptables-legacy", "--version"},
		{"iptables-nft-save", "--version"}, {"ipset", "version"}, {"conntrack", "--version"},
		{"sh", "-c", "mktemp -u /tmp/x.XXXXXX && cp --version && mv --version && sync --version && cmp --version && basename /a/b"},
		{"sh", Installer, "--no-such-flag"},
		{Routeletd, "version"},
	}
	for _, r := range runs {
		cmd := exec.Command("chroot", append([]string{dir}, r...)...)
		cmd.Env = Env
		out, err := cmd.CombinedOutput()
		if r[1] == Installer {
			// The installer runs and rejects the bad flag by name.
			if !strings.Contains(string(out), `unknown argument "--no-such-flag"`) {
				t.Errorf("installer in the image: %v, %s", err, out)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v in the image: %v\n%s", r, err, out)
		}
	}
	for _, pl := range Plugins {
		cmd := exec.Command("chroot", dir, path.Join(PluginDir, pl))
		cmd.Env = append(Env, "CNI_COMMAND=VERSION")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION in the image: %v, %s", pl, err, out)
		}
	}
}
