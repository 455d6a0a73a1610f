package state

import "golang.org/x/sys/unix"

// setUmask swaps the process umask so permission tests see the modes the code
// asks for, not the modes the test runner's umask leaves.
func setUmask(m int) int { return unix.Umask(m) }
