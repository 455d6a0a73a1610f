package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of routelet's own layer: Src on the build machine goes
// to Path in the image with Mode.
type File struct {
	Path string
	Src  string
	Mode fs.FileMode
}

// Spec is what Write puts into the image.
type Spec struct {
	// Rootfs is a directory tree that becomes the first layer (the
	// userland), as is; "" for none.
	Rootfs string
	// Files make the second layer.
	Files []File
	// Tag names the image in the tarball, e.g. "routelet:latest".
	Tag string
	// Version and Revision, when set, label the image
	// (org.opencontainers.image.version and .revision): the version
	// stamped into its binaries and the commit they were built from.
	Version, Revision string
}

// Env is the image's environment.
var Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// epoch is every file's mtime, so the same inputs give the same layers.
var epoch = time.Unix(0, 0).UTC()

// Write builds the image of s and writes it to out as a docker-archive
// tarball (what `docker load` and `ctr images import` read), through a temp
// file renamed into place.
func Write(out string, s Spec) error {
	tag, err := name.NewTag(s.Tag)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", s.Tag, err)
	}
	var layers []v1.Layer
	if s.Rootfs != "" {
		data, err := dirTar(s.Rootfs)
		if err != nil {
			return fmt.Errorf("userland layer from %s: %w", s.Rootfs, err)
		}
		l, err := bytesLayer(data)
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	data, err := filesTar(s.Files)
	if err != nil {
		return fmt.Errorf("routelet layer: %w", err)
	}
	l, err := bytesLayer(data)
	if err != nil {
		return err
	}
	layers = append(layers, l)

	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{Routeletd}
	cf.Config.Env = Env
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "routelet"}
	if s.Version != "" {
		cf.Config.Labels["org.opencontainers.image.version"] = s.Version
	}
	if s.Revision != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = s.Revision
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return fmt.Errorf("set image config: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// bytesLayer makes a gzip-compressed layer of an uncompressed tar.
func bytesLayer(data []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	return l, nil
}

// dirTar archives the tree under dir (owned by root, fixed mtimes, in
// lexical order); symlinks are kept as links.
func dirTar(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() && !info.IsDir() && info.Mode()&fs.ModeSymlink == 0 {
			return fmt.Errorf("%s: only files, directories and symlinks can go into the image", p)
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		normalize(h)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// filesTar archives files at their image paths, with their parent
// directories.
func filesTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirs []string
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image path %q is not absolute and clean", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}
		normalize(h)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, fmt.Errorf("read %s for %s: %w", f.Src, f.Path, err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: int64(f.Mode.Perm()), Size: int64(len(data))}
		normalize(h)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// normalize makes h root-owned with the fixed mtime.
func normalize(h *tar.Header) {
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
	h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
}
