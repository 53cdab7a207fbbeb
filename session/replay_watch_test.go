package session

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// TestCloseWatchCancelsReplayOfGoneClient: a watched replay is cancelled
// once its client is closed, the others of the instance are not; one whose
// watch ended is never cancelled; the watch's goroutine ends when nothing
// is watched, and a new watch starts it again.
func TestCloseWatchCancelsReplayOfGoneClient(t *testing.T) {
	server := mqtt.New(nil)
	t.Cleanup(func() { _ = server.Close() })
	client := func(id string) *mqtt.Client {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return server.NewClient(a, "t", id, false)
	}
	stop := make(chan struct{})
	w := &closeWatch{stop: stop}
	gone, stays, ended := client("gone"), client("stays"), client("ended")
	ctxGone, cancelGone := context.WithCancel(context.Background())
	ctxStays, cancelStays := context.WithCancel(context.Background())
	ctxEnded, cancelEnded := context.WithCancel(context.Background())
	defer cancelStays()
	defer w.watch(gone, cancelGone)()
	unwatchStays := w.watch(stays, cancelStays)
	w.watch(ended, cancelEnded)()
	ended.Stop(errors.New("closed after its replay"))
	gone.Stop(errors.New("the client went"))
	select {
	case <-ctxGone.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the replay of a closed client was not cancelled")
	}
	// Three looks of the watch after the one that cancelled.
	time.Sleep(3 * closeWatchEvery)
	if ctxStays.Err() != nil {
		t.Fatal("the replay of a client still connected was cancelled")
	}
	if ctxEnded.Err() != nil {
		t.Fatal("a replay whose watch had ended was cancelled")
	}
	unwatchStays()
	waitRunning := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			w.mu.Lock()
			running := w.running
			w.mu.Unlock()
			if running == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watch's goroutine running = %v, want %v", running, want)
			}
			time.Sleep(closeWatchEvery / 5)
		}
	}
	waitRunning(false)

	again := client("again")
	ctxAgain, cancelAgain := context.WithCancel(context.Background())
	defer w.watch(again, cancelAgain)()
	waitRunning(true)
	again.Stop(errors.New("went too"))
	select {
	case <-ctxAgain.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("after the watch's goroutine had ended, a new watch did not cancel the replay of its closed client")
	}
}

// TestCloseWatchCancelsEverythingAtStop: when the engine stops, every
// watched replay is cancelled, and one that starts later at once.
func TestCloseWatchCancelsEverythingAtStop(t *testing.T) {
	server := mqtt.New(nil)
	t.Cleanup(func() { _ = server.Close() })
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	cl := server.NewClient(a, "t", "dev", false)
	stop := make(chan struct{})
	w := &closeWatch{stop: stop}
	ctx, cancel := context.WithCancel(context.Background())
	defer w.watch(cl, cancel)()
	close(stop)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a replay was not cancelled when the engine stopped")
	}
	later, cancelLater := context.WithCancel(context.Background())
	w.watch(cl, cancelLater)
	if later.Err() == nil {
		t.Fatal("a replay that started after the engine stopped was not cancelled at once")
	}
}
