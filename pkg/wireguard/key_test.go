package wireguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	k1, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatalf("first load: created %v, err %v", created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyDir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Join(dir, KeyDir)); di.Mode().Perm() != 0o700 {
		t.Errorf("key dir mode %v, want 0700", di.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(dir)
	if err != nil || created || k2 != k1 {
		t.Fatalf("second load: created %v, err %v, same key %v", created, err, k2 == k1)
	}
	k3, err := RotateKey(dir)
	if err != nil || k3 == k1 {
		t.Fatalf("rotate: err %v, new key differs %v", err, k3 != k1)
	}
	if k4, err := LoadKey(dir); err != nil || k4 != k3 {
		t.Fatalf("load after rotate: err %v, rotated key %v", err, k4 == k3)
	}
}

func TestLoadKeyRefusesBadFiles(t *testing.T) {
	for name, content := range map[string]string{
		"not base64": "not a key at all\n",
		"short":      "AAAA\n",
		"all zero":   strings.Repeat("A", 43) + "=\n",
		"too large":  strings.Repeat("A", 4096),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, KeyDir), 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, KeyDir, KeyFile)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadOrCreateKey(dir)
			if err == nil {
				t.Fatal("bad key file accepted")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if got, _ := os.ReadFile(path); string(got) != content {
				t.Error("bad key file was rewritten")
			}
		})
	}
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, KeyDir), 0o700)
		target := filepath.Join(dir, "elsewhere")
		os.WriteFile(target, []byte("x"), 0o600)
		if err := os.Symlink(target, filepath.Join(dir, KeyDir, KeyFile)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateKey(dir); err == nil {
			t.Fatal("symlinked key file followed")
		}
	})
}
