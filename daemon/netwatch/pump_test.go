package netwatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestPumpResubscribes: when a subscription's channel closes (its socket
// failed), every owner gets a rescan, the failed socket is released, and
// the pump subscribes again — retrying a failed re-subscription with
// backoff — and goes on delivering.
func TestPumpResubscribes(t *testing.T) {
	w := fakeWatcher(nil)
	rec := &recorder{}
	w.Register("owner", Interest{}, rec)

	var mu sync.Mutex
	var chans []chan int
	var dones []chan struct{}
	attempts := 0
	sub := func(ch chan int, done chan struct{}) error {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts == 2 {
			return errors.New("injected subscribe failure")
		}
		chans, dones = append(chans, ch), append(dones, done)
		return nil
	}
	ch, done, err := subscribe(sub, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan int, 10)
	stopped := make(chan struct{})
	go func() {
		pump(ctx, w, "test", ch, done, sub, func(v int) { handled <- v })
		close(stopped)
	}()
	recv := func(want int) {
		t.Helper()
		select {
		case v := <-handled:
			if v != want {
				t.Fatalf("handled %d, want %d", v, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("update %d not handled within 10s", want)
		}
	}
	ch <- 1
	recv(1)
	close(ch) // the library closes the channel when the socket fails
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(chans)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no re-subscription within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-dones[0]:
	default:
		t.Error("the failed subscription's done channel was not closed")
	}
	rec.mu.Lock()
	rescans := rec.rescans
	rec.mu.Unlock()
	if rescans < 1 {
		t.Errorf("%d rescans after a lost subscription, want at least 1", rescans)
	}
	mu.Lock()
	next := chans[1]
	mu.Unlock()
	next <- 2
	recv(2)
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("pump did not stop with its context")
	}
	select {
	case <-dones[1]:
	default:
		t.Error("the live subscription's done channel was not closed on stop")
	}
}
