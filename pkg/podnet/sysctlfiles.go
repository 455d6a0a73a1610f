package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// maxSysctlFiles bounds how many sysctl files a Keeper keeps open (three
// per IPv6 pod's veth, two per IPv4 pod's); beyond it a read opens and
// closes its file as readSysctlFast does.
const maxSysctlFiles = 2048

// sysctlFiles keeps the sysctl files a Keeper polls open, so that a poll
// costs one pread per setting instead of a path walk through /proc/sys
// (about a tenth of the CPU). A kept file is only ever the setting it was
// opened for: when the interface is deleted, renamed or moved to another
// namespace the kernel unregisters its settings and reads of the old file
// fail with ENOENT; the file is then closed and the key opened again by
// name, which finds the interface now called that, or nothing. Files are
// those of the namespace of the thread that first read them. Not safe for
// concurrent use.
type sysctlFiles struct {
	fds map[string]int // key → open file
}

// read returns the value of key, from its kept file when there is one.
func (f *sysctlFiles) read(key string) (string, error) {
	if fd, ok := f.fds[key]; ok {
		if v, err := preadSysctl(fd); err == nil {
			return v, nil
		}
		f.close(key) // the setting is gone: its name may mean another now
	}
	p := procSys + "/" + key
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, &fs.PathError{Op: "open", Path: p, Err: err})
	}
	v, err := preadSysctl(fd)
	if err != nil || len(f.fds) >= maxSysctlFiles {
		unix.Close(fd)
	} else {
		if f.fds == nil {
			f.fds = map[string]int{}
		}
		f.fds[key] = fd
	}
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, &fs.PathError{Op: "read", Path: p, Err: err})
	}
	return v, nil
}

// close closes the kept file of key, if any.
func (f *sysctlFiles) close(key string) {
	if fd, ok := f.fds[key]; ok {
		unix.Close(fd)
		delete(f.fds, key)
	}
}

// closeAll closes every kept file.
func (f *sysctlFiles) closeAll() {
	for key := range f.fds {
		f.close(key)
	}
}

// preadSysctl reads a sysctl's value from the start of its open file into
// a small buffer (see readSysctlFast).
func preadSysctl(fd int) (string, error) {
	var buf [32]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", errors.New("negative read")
	}
	return string(bytes.TrimSpace(buf[:n])), nil
}
