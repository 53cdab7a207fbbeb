package session

import (
	"context"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// closeWatchEvery is how often the close watch looks at the clients of
// the running replays: a replay of a client that went stops within it.
const closeWatchEvery = 50 * time.Millisecond

// closeWatch cancels a replay once its client is gone (or the engine
// stops): one goroutine and one ticker for all the replays of an instance.
// A goroutine with its own ticker per replay cost a storm of 10,000
// resumes about a fifth of an instance's CPU in timer wake-ups and
// scheduling (BenchmarkResumeStorm's CPU profile), for 200,000 looks a
// second that found nothing.
type closeWatch struct {
	stop <-chan struct{}

	mu      sync.Mutex
	watched map[*watchedReplay]struct{}
	running bool // the goroutine runs (it ends when nothing is watched or at stop)
}

// watchedReplay is one replay's client and the cancel of its context.
type watchedReplay struct {
	cl     *mqtt.Client
	cancel context.CancelFunc
}

// watch cancels cancel once cl is closed or the engine stops, and returns
// the function that ends the watch (the replay is over).
func (w *closeWatch) watch(cl *mqtt.Client, cancel context.CancelFunc) (unwatch func()) {
	if w.stopping() || cl.Closed() {
		cancel()
		return func() {}
	}
	wr := &watchedReplay{cl: cl, cancel: cancel}
	w.mu.Lock()
	if w.watched == nil {
		w.watched = make(map[*watchedReplay]struct{})
	}
	w.watched[wr] = struct{}{}
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.watched, wr)
		w.mu.Unlock()
	}
}

// stopping reports whether the engine stops. (A watch that comes just
// after the goroutine ended at stop starts another, which cancels it at
// its first look.)
func (w *closeWatch) stopping() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// run looks at the watched clients every closeWatchEvery until none is
// left or the engine stops.
func (w *closeWatch) run() {
	t := time.NewTicker(closeWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			w.mu.Lock()
			w.running = false
			for wr := range w.watched {
				wr.cancel()
				delete(w.watched, wr)
			}
			w.mu.Unlock()
			return
		case <-t.C:
		}
		w.mu.Lock()
		for wr := range w.watched {
			if wr.cl.Closed() {
				wr.cancel()
				delete(w.watched, wr)
			}
		}
		if len(w.watched) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}
