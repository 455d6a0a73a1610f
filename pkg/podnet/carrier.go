package podnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// A link deletion returns only after the kernel has waited for every RCU
// callback queued before it and for the device's last references (tens of
// milliseconds on a small VM), though the link is off the node, its routes
// flushed and its hooks detached, well before: when the kernel announces
// it (RTM_DELLINK). A command that must not wait that long hands the
// request to a carrier: a process of the same binary, started in a session
// of its own, that sends the request on a route netlink socket it is
// given and waits for the kernel's answer on the command's behalf, holding
// whatever else the command must keep open until then. The
// command returns once the announcement has arrived; the carrier ends by
// itself when the kernel is done, and is reaped by init.

// carrierEnv names the ifindex a carrier deletes; fd 3 is its socket.
const carrierEnv = "ROUTELET_LINK_DELETE_CARRIER"

// carrierBadRequest is a carrier's exit status for a request it could not
// read; any other non-zero status is the errno the kernel answered.
const carrierBadRequest = 255

// carrierReady is set by CarrierMain: the running binary serves as its own
// carrier.
var carrierReady atomic.Bool

// carrierStarts counts the carriers this process started.
var carrierStarts atomic.Int64

// CarrierMain makes the running binary a link deletion carrier: called
// first in main, it carries the deletion and exits when the process was
// started as one, and otherwise lets TeardownThen hand deletions to a
// carrier started from this binary. A binary that never calls it (a test
// binary) deletes in-process.
func CarrierMain() {
	if v, ok := os.LookupEnv(carrierEnv); ok {
		os.Exit(carry(v, 3))
	}
	carrierReady.Store(true)
}

// carry sends the deletion of ifindex v on the route netlink socket fd and
// returns the exit status: 0 when the kernel acknowledged it, the errno it
// answered otherwise.
func carry(v string, fd int) int {
	index, err := strconv.Atoi(v)
	if err != nil || index <= 0 || index > 1<<31-1 {
		return carrierBadRequest
	}
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	if err := unix.Sendto(fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return errnoStatus(err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return errnoStatus(err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return carrierBadRequest
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if e := -int32(binary.NativeEndian.Uint32(m.Data[:4])); e > 0 && e < carrierBadRequest {
				return int(e)
			} else if e != 0 {
				return carrierBadRequest
			}
			return 0
		}
	}
}

func errnoStatus(err error) int {
	var e unix.Errno
	if errors.As(err, &e) && e > 0 && e < carrierBadRequest {
		return int(e)
	}
	return carrierBadRequest
}

// startCarrier starts a carrier for the deletion of index in the node
// namespace the calling thread is in (its socket is made here), detached:
// a session of its own, no standard streams; it holds hold (fd 4) open
// until it ends. exited receives its outcome should it end while the
// caller still runs.
func startCarrier(index int, hold *os.File) (exited <-chan error, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("carrier socket: %w", err)
	}
	sock := os.NewFile(uintptr(fd), "netlink")
	defer sock.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"routelet-link-delete"}
	cmd.Env = []string{carrierEnv + "=" + strconv.Itoa(index)}
	cmd.ExtraFiles = []*os.File{sock}
	if hold != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, hold)
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start carrier: %w", err)
	}
	carrierStarts.Add(1)
	ch := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			ch <- nil
		case errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode() < carrierBadRequest:
			ch <- unix.Errno(ee.ExitCode())
		default:
			ch <- fmt.Errorf("carrier: %w", err)
		}
	}()
	return ch, nil
}
