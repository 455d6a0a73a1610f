package image

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is one file of an image's flattened filesystem.
type entry struct {
	mode fs.FileMode
	link string
	data []byte
}

// readImage reads the tarball at p back, as a loader would: the image
// named tag, its config, and its flattened filesystem.
func readImage(t *testing.T, p, tagName string) (*v1.ConfigFile, map[string]entry) {
	t.Helper()
	tag, err := name.NewTag(tagName)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatalf("read image %s from %s: %v", tagName, p, err)
	}
	if _, err := img.Manifest(); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("flattened filesystem: %v", err)
		}
		e := entry{mode: h.FileInfo().Mode(), link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			if e.data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		files["/"+strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = e
	}
	return cf, files
}

// resolve follows symlinks inside the image's filesystem.
func resolve(files map[string]entry, p string) (string, entry, bool) {
	for range 40 {
		// Resolve links in the parent directories first.
		dir, base := path.Split(p)
		if dir != "/" {
			if d, _, ok := resolve(files, path.Clean(dir)); ok {
				p = path.Join(d, base)
			}
		}
		e, ok := files[p]
		if !ok {
			return p, e, false
		}
		if e.mode&fs.ModeSymlink == 0 {
			return p, e, true
		}
		if path.IsAbs(e.link) {
			p = path.Clean(e.link)
		} else {
			p = path.Join(path.Dir(p), e.link)
		}
	}
	return p, entry{}, false
}

// TestWriteImage writes an image from a small rootfs and files and reads
// it back: the tag, entrypoint and environment, files at their paths with
// their modes, symlinks kept.
func TestWriteImage(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/iptables-nft"), []byte("nft"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("iptables-nft", filepath.Join(root, "usr/sbin/iptables")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/sbin", filepath.Join(root, "sbin")); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	var files []File
	for _, p := range append([]string{Routeletd, Installer}, path.Join(PluginDir, "routelet")) {
		s := filepath.Join(src, path.Base(p))
		if err := os.WriteFile(s, []byte("content of "+p), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Path: p, Src: s, Mode: 0o755})
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := Write(out, Spec{Rootfs: root, Files: files, Tag: "routelet:v9.8.7", Version: "v9.8.7", Revision: "0123456789abcdef0123456789abcdef01234567"}); err != nil {
		t.Fatal(err)
	}
	cf, fsys := readImage(t, out, "routelet:v9.8.7")
	if !slices.Equal(cf.Config.Entrypoint, []string{Routeletd}) || !slices.Equal(cf.Config.Env, Env) || cf.OS != "linux" {
		t.Errorf("config: entrypoint %v env %v os %q", cf.Config.Entrypoint, cf.Config.Env, cf.OS)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":    "routelet",
		"org.opencontainers.image.version":  "v9.8.7",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	for _, f := range files {
		e, ok := fsys[f.Path]
		if !ok || string(e.data) != "content of "+f.Path || e.mode.Perm() != 0o755 {
			t.Errorf("%s in image: present %v, mode %v, %q", f.Path, ok, e.mode, e.data)
		}
	}
	if p, e, ok := resolve(fsys, "/sbin/iptables"); !ok || p != "/usr/sbin/iptables-nft" || string(e.data) != "nft" {
		t.Errorf("/sbin/iptables resolves to %s (found %v)", p, ok)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temp file left: %v", err)
	}
	if err := Write(out, Spec{Files: []File{{Path: "relative/path", Src: files[0].Src}}, Tag: "routelet:test"}); err == nil || !strings.Contains(err.Error(), "relative/path") {
		t.Errorf("relative image path: %v, want an error naming it", err)
	}
}

// TestDockerfileFollowsLayout: the Dockerfile puts the binaries where the
// DaemonSet and the daemonless build expect them.
func TestDockerfileFollowsLayout(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	for _, want := range []string{
		"/out/routeletd " + Routeletd,
		"install/install-cni.sh " + Installer,
		`ENTRYPOINT ["` + Routeletd + `"]`,
		PluginDir + "/",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for _, p := range Plugins {
		if !strings.Contains(df, "/out/"+p+" ") {
			t.Errorf("Dockerfile does not copy plugin %s", p)
		}
	}
}

// builtImage returns the tarball `make image` wrote, or skips t.
func builtImage(t *testing.T) string {
	t.Helper()
	p := os.Getenv("ROUTELET_IMAGE")
	if p == "" {
		p = "../../bin/routelet-image.tar"
	}
	if _, err := os.Stat(p); err != nil {
		msg := "no image tarball at " + p + " (run make image, or set ROUTELET_IMAGE): " + err.Error()
		if os.Getenv("ROUTELET_IMAGE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}
