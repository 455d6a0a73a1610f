package netnstest

import (
	"os/exec"
	"runtime"
	"sync"
)

// starter is a goroutine locked for good to one thread, which starts the
// commands StartPinned is given.
var starter = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range ch {
			f()
		}
	}()
	return ch
})

// StartPinned starts cmd from a thread that lives as long as this process.
// A child's Pdeathsig fires when the thread that forked it exits, not the
// process: Go ends a thread whenever a goroutine exits locked to it (as
// DoWithRunDir's does, to discard a thread whose mount namespace it
// changed), and a child forked from a thread some later goroutine locks
// and abandons would be killed then, long before this process ends.
func StartPinned(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	starter() <- func() { errc <- cmd.Start() }
	return <-errc
}
