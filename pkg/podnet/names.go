package podnet

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/routelet/routelet/pkg/defaults"
)

// DefaultPrefix is the host veth name prefix used when none is configured.
const DefaultPrefix = defaults.VethPrefix

// maxIfNameLen is the longest Linux interface name (IFNAMSIZ - 1).
const maxIfNameLen = 15

// minHashChars is the fewest hash characters a host veth name keeps, so that a
// long prefix cannot make names of different pods collide wholesale.
const minHashChars = 4

// MaxPrefixLen is the longest accepted interface prefix.
const MaxPrefixLen = maxIfNameLen - minHashChars

var prefixRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)

// ValidatePrefix checks a host veth name prefix: 1..MaxPrefixLen bytes,
// starting with a letter, then letters, digits, '_' or '-'. The error names
// the value.
func ValidatePrefix(prefix string) error {
	if len(prefix) == 0 || len(prefix) > MaxPrefixLen {
		return fmt.Errorf("interface prefix %q: must be 1 to %d bytes long", prefix, MaxPrefixLen)
	}
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("interface prefix %q: must start with a letter and contain only letters, digits, '_' or '-'", prefix)
	}
	return nil
}

// VethName returns the host-side veth name of an attachment: prefix followed
// by the first hex digits of a SHA-1, up to 15 bytes in all. With both
// Kubernetes pod arguments the hash covers "<namespace>.<pod>" (so the name is
// stable across sandbox restarts of one pod, as operators expect from Calico);
// an attachment on an interface other than eth0 appends ".<ifName>" so a pod
// with two attachments on this network gets two names. Without them the hash
// covers "<containerID>.<ifName>". prefix must have passed ValidatePrefix.
func VethName(prefix, podNamespace, podName, containerID, ifName string) string {
	var key string
	switch {
	case podNamespace != "" && podName != "" && (ifName == "eth0" || ifName == ""):
		key = podNamespace + "." + podName
	case podNamespace != "" && podName != "":
		key = podNamespace + "." + podName + "." + ifName
	default:
		key = containerID + "." + ifName
	}
	sum := sha1.Sum([]byte(key))
	name := prefix + hex.EncodeToString(sum[:])
	if len(name) > maxIfNameLen {
		name = name[:maxIfNameLen]
	}
	return name
}
