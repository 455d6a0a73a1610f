package wireguard

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/state"
)

// KeyDir is the state directory's subdirectory holding the node's
// WireGuard private key (root only: 0700, the file 0600).
const KeyDir = "wireguard"

// KeyFile is the name of the private key file in KeyDir: the key in
// base64, as wg(8) writes it, and a newline.
const KeyFile = "private.key"

// maxKeyFile bounds the key file's read: a base64 key is 44 bytes.
const maxKeyFile = 256

// LoadOrCreateKey returns the node's private key from
// <stateDir>/wireguard/private.key, generating and writing one first when
// there is none (created reports that). A file that is not a key (a
// symlink, another length, not base64, all zero) is an error naming it:
// the key is never replaced behind the operator's back.
func LoadOrCreateKey(stateDir string) (key wgtypes.Key, created bool, err error) {
	key, err = LoadKey(stateDir)
	if err == nil {
		return key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, false, err
	}
	key, err = writeNewKey(stateDir)
	return key, err == nil, err
}

// LoadKey reads the node's private key; fs.ErrNotExist when there is none.
func LoadKey(stateDir string) (wgtypes.Key, error) {
	dir := filepath.Join(stateDir, KeyDir)
	data, err := state.ReadFileNoFollowMax(dir, KeyFile, maxKeyFile)
	if err != nil {
		return wgtypes.Key{}, err
	}
	return ParseKey(filepath.Join(dir, KeyFile), strings.TrimSpace(string(data)))
}

// RotateKey replaces the node's private key with a new one and returns it.
// The write is atomic: a reader sees the old key or the new one.
func RotateKey(stateDir string) (wgtypes.Key, error) { return writeNewKey(stateDir) }

// ParseKey parses a base64 WireGuard key, refusing the all-zero key (no
// peer can have it). what names the value in the error.
func ParseKey(what, s string) (wgtypes.Key, error) {
	k, err := wgtypes.ParseKey(s)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("%s: %q is not a WireGuard key (32 bytes in base64)", what, s)
	}
	if k == (wgtypes.Key{}) {
		return wgtypes.Key{}, fmt.Errorf("%s: the all-zero key is not a WireGuard key", what)
	}
	return k, nil
}

func writeNewKey(stateDir string) (wgtypes.Key, error) {
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("wireguard: generate key: %w", err)
	}
	dir := filepath.Join(stateDir, KeyDir)
	if err := state.EnsureDir(dir); err != nil {
		return wgtypes.Key{}, err
	}
	if err := state.WriteFileAtomic(dir, KeyFile, []byte(key.String()+"\n")); err != nil {
		return wgtypes.Key{}, err
	}
	return key, nil
}
