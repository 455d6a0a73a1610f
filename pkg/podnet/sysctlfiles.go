package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// maxSysctlFiles bounds how many sysctl files a Keeper keeps open (three
// per IPv6 pod's veth, two per IPv4 pod's), and so does half the process's
// open-file limit; beyond it a read opens and closes its file as
// readSysctlFast does.
const maxSysctlFiles = 2048

// fileTableSlack is how many descriptors beyond the kept files reserve
// sizes the process's file table for (the daemon's sockets and the like).
const fileTableSlack = 256

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
	fds   map[string]int // key → open file
	limit int            // most files kept (reserve; 0: none)
}

// reserve sets how many files f may keep and sizes the process's file
// table for them now. The kernel grows the table as descriptors are
// taken, and in a multi-threaded process each growth waits for an RCU
// grace period: tens of milliseconds in which the thread opening the file
// stands still. Grown once here, when the Keeper is made, it is not grown
// again by a poll that opens the files of new pods.
func (f *sysctlFiles) reserve() {
	f.limit = maxSysctlFiles
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 2*uint64(f.limit+fileTableSlack) {
		f.limit = max(int(lim.Cur/2)-fileTableSlack, 0)
	}
	if f.limit == 0 {
		return
	}
	dir, err := unix.Open(procSys, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // the reads will say what is wrong
	}
	defer unix.Close(dir)
	if high, err := unix.FcntlInt(uintptr(dir), unix.F_DUPFD_CLOEXEC, f.limit+fileTableSlack); err == nil {
		unix.Close(high)
	}
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
	if err != nil || len(f.fds) >= f.limit {
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
