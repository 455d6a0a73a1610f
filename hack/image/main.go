// Command image builds routelet's container image without a container
// daemon: static Go binaries (routeletd, routelet, portmap) on top of a
// userland made from Debian packages' files (iptables, ipset, conntrack, a
// shell and coreutils for the installer, and every library they load, found
// with ldd and mapped to packages with dpkg -S), written as a docker-archive
// tarball that `ctr images import` and `docker load` accept. The Dockerfile
// builds the same layout with a daemon.
//
// Usage: go run ./hack/image [-o bin/routelet-image.tar] [-tag routelet:latest] [-version v0.1.0]
//
// With -version the binaries are stamped with it (internal/buildinfo) and
// the image is labelled with it and with the checkout's commit.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/routelet/routelet/install/image"
	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/testbins"
)

// basePackages are the Debian packages whose programs the image runs;
// libraries they need are added by closure.
var basePackages = []string{"iptables", "ipset", "conntrack", "dash", "coreutils", "diffutils", "netbase", "libc6"}

// alternatives are the links Debian's update-alternatives makes at install
// time (not in the packages): iptables is the nft variant, as Debian's
// default.
var alternatives = map[string]string{
	"usr/sbin/iptables":          "iptables-nft",
	"usr/sbin/iptables-save":     "iptables-nft-save",
	"usr/sbin/iptables-restore":  "iptables-nft-restore",
	"usr/sbin/ip6tables":         "ip6tables-nft",
	"usr/sbin/ip6tables-save":    "ip6tables-nft-save",
	"usr/sbin/ip6tables-restore": "ip6tables-nft-restore",
}

func main() {
	out := flag.String("o", "bin/routelet-image.tar", "output tarball")
	tag := flag.String("tag", "routelet:latest", "image name in the tarball")
	ver := flag.String("version", "", "version to stamp into the binaries and label the image with (a v-tag; empty: unstamped)")
	debs := flag.String("debs", filepath.Join(testbins.CacheDir(), "debs"), "download cache for Debian packages")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if *ver != "" {
		if err := buildinfo.Valid(*ver); err != nil {
			fmt.Fprintf(os.Stderr, "image: -version: %v\n", err)
			os.Exit(2)
		}
	}
	if err := run(*out, *tag, *ver, *debs); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(out, tag, ver, debs string) error {
	root, err := netnstest.ModuleRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "routelet-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	bins := filepath.Join(work, "bin")
	ldflags := "-s -w"
	rev, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil && ver != "" {
		return fmt.Errorf("the commit to stamp and label version %s with: git rev-parse HEAD: %w", ver, err)
	}
	revision := strings.TrimSpace(string(rev))
	if revision != "" {
		ldflags += " " + buildinfo.RevisionLDFlag(revision)
	}
	if ver != "" {
		ldflags += " " + buildinfo.LDFlag(ver)
	}
	builds := map[string]string{"routeletd": "./daemon", "routelet": "./plugin", "portmap": "github.com/containernetworking/plugins/plugins/meta/portmap"}
	for _, n := range slices.Sorted(mapsKeys(builds)) {
		slog.Info("building", "binary", n)
		cmd := exec.Command("go", "build", "-trimpath", "-tags", netnstest.BuildTags, "-ldflags", ldflags, "-o", filepath.Join(bins, n), builds[n])
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", builds[n], err, o)
		}
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := debianRootfs(rootfs, debs); err != nil {
		return err
	}
	files := []image.File{{Path: image.Routeletd, Src: filepath.Join(bins, "routeletd"), Mode: 0o755}}
	for _, p := range image.Plugins {
		files = append(files, image.File{Path: filepath.Join(image.PluginDir, p), Src: filepath.Join(bins, p), Mode: 0o755})
	}
	files = append(files, image.File{Path: image.Installer, Src: filepath.Join(root, "install", "install-cni.sh"), Mode: 0o755})
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	spec := image.Spec{Rootfs: rootfs, Files: files, Tag: tag}
	if ver != "" {
		spec.Version, spec.Revision = ver, revision
	}
	if err := image.Write(out, spec); err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	slog.Info("wrote image", "path", out, "tag", tag, "bytes", st.Size())
	return nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// debianRootfs extracts basePackages and the packages of every library
// their ELF files load into dir, laid out with Debian's merged /usr.
func debianRootfs(dir, debs string) error {
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "run", "tmp", "var", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	for link, target := range map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64", "var/run": "../run"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			return err
		}
	}
	have := map[string]bool{}
	checked := map[string]bool{} // ELF files ldd has seen, across rounds
	todo := slices.Clone(basePackages)
	for len(todo) > 0 {
		for _, p := range todo {
			if err := extract(p, dir, debs); err != nil {
				return err
			}
			have[p] = true
		}
		todo = nil
		libs, err := neededLibs(dir, checked)
		if err != nil {
			return err
		}
		for _, lib := range libs {
			pkg, err := packageOf(lib)
			if err != nil {
				return err
			}
			if !have[pkg] && !slices.Contains(todo, pkg) {
				slog.Info("adding library package", "package", pkg, "for", lib)
				todo = append(todo, pkg)
			}
		}
	}
	for link, target := range alternatives {
		p := filepath.Join(dir, link)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "usr/bin/sh")); err != nil {
		if err := os.Symlink("dash", filepath.Join(dir, "usr/bin/sh")); err != nil {
			return err
		}
	}
	// Documentation, manuals and locales are not needed to run.
	for _, d := range []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	slog.Info("userland ready", "packages", len(have))
	return nil
}

// extract downloads pkg's .deb into debs (once) and unpacks its files into
// dir, keeping dir's merged-/usr links.
func extract(pkg, dir, debs string) error {
	matches, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(matches) == 0 {
		if err := aptDownload(pkg, debs); err != nil {
			return err
		}
		matches, _ = filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
		if len(matches) == 0 {
			return fmt.Errorf("apt-get download %s left no .deb in %s", pkg, debs)
		}
	}
	deb := matches[len(matches)-1]
	fsys := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	untar := exec.Command("tar", "-x", "--keep-directory-symlink", "-C", dir)
	pipe, err := fsys.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var e1, e2 bytes.Buffer
	fsys.Stderr, untar.Stderr = &e1, &e2
	if err := untar.Start(); err != nil {
		return err
	}
	if err := fsys.Run(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, e1.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpack %s: %w: %s", deb, err, e2.String())
	}
	return nil
}

// aptDownload fetches pkg's .deb into dir, updating the package lists once
// when apt does not know it.
func aptDownload(pkg, dir string) error {
	try := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "download", "-q", pkg)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := try()
	if err == nil {
		return nil
	}
	slog.Info("apt-get download failed; updating package lists", "package", pkg)
	if o, err := exec.Command("apt-get", "update", "-q").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, o)
	}
	if out, err = try(); err != nil {
		return fmt.Errorf("apt-get download %s: %w\n%s", pkg, err, out)
	}
	return nil
}

var lddRe = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// neededLibs lists the library paths (as the build machine's loader
// resolves them) that the ELF files under dir not yet in checked load, and
// adds those files to checked.
func neededLibs(dir string, checked map[string]bool) ([]string, error) {
	var libs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if checked[p] || !isELF(p) {
			return nil
		}
		checked[p] = true
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			return nil // static, or not for this machine: nothing to add
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "not found") {
				return fmt.Errorf("%s needs a library the build machine lacks: %s", p, strings.TrimSpace(line))
			}
			// A library found inside dir (through a $ORIGIN run path) is
			// already there.
			if m := lddRe.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], dir+"/") && !slices.Contains(libs, m[1]) {
				libs = append(libs, m[1])
			}
		}
		return nil
	})
	return libs, err
}

// isELF reports whether p starts with the ELF magic.
func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false
	}
	return string(magic[:]) == "\x7fELF"
}

// packageOf returns the Debian package that ships path (trying the other
// side of the /usr merge too).
func packageOf(path string) (string, error) {
	cands := []string{path}
	if strings.HasPrefix(path, "/usr/") {
		cands = append(cands, strings.TrimPrefix(path, "/usr"))
	} else {
		cands = append(cands, "/usr"+path)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		cands = append(cands, real)
	}
	for _, c := range cands {
		out, err := exec.Command("dpkg-query", "-S", c).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			pkg, file, ok := strings.Cut(line, ": ")
			if !ok || strings.HasPrefix(line, "diversion") || file != c {
				continue
			}
			pkg, _, _ = strings.Cut(pkg, ":") // drop the architecture
			return strings.TrimSpace(pkg), nil
		}
	}
	return "", errors.New("no Debian package ships " + path)
}
