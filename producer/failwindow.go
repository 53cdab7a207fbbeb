package producer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// failWindows keep order per Kafka key when a record fails: per key, the
// window of receipt times whose records fail with it. When a QoS 1/2
// record of key K received at r fails or expires at time t, every record
// of K received in (r, t] is still behind it in the pipeline (ring or
// partition queue): sending one of them would let it overtake the failed
// record, which its client resends. Those records fail too; records of other keys,
// records of K received before r (ahead of it) or after t are not affected.
//
// A record refused because it is too large on its own does not block its
// key: it can never be written, so nothing overtakes a resend of it.
//
// Safe for concurrent use: the producer's loop and Producer.Failed (a ring
// eviction by the caller) both report failures. The hot path costs one
// atomic load while nothing failed.
type failWindows struct {
	keep time.Duration // how long a failure is remembered

	n      atomic.Int64 // entries in failed; 0 = fast path
	mu     sync.Mutex
	failed map[windowKey]window
}

// window is (from, to]: records received in it fail. Failures of one key
// merge into one window (it may cover a little more than needed, never less).
type window struct{ from, to time.Time }

type windowKey struct{ topic, key string }

func newFailWindows(keep time.Duration) *failWindows {
	return &failWindows{keep: keep, failed: make(map[windowKey]window)}
}

// fail records that a QoS 1/2 record of r's key failed now.
func (fw *failWindows) fail(r *Record, now time.Time) {
	if r.Done == nil {
		return // QoS 0 is best effort: its loss does not hold back others
	}
	k := windowKey{r.Topic, string(r.Key)}
	w := window{from: r.Received, to: now}
	fw.mu.Lock()
	if old, ok := fw.failed[k]; !ok {
		fw.n.Add(1)
	} else {
		if old.from.Before(w.from) {
			w.from = old.from
		}
		if old.to.After(w.to) {
			w.to = old.to
		}
	}
	fw.failed[k] = w
	fw.mu.Unlock()
}

// blocked reports whether r must fail because an earlier record of its key
// failed after r was received.
func (fw *failWindows) blocked(r *Record) bool {
	if fw.n.Load() == 0 {
		return false
	}
	fw.mu.Lock()
	w, ok := fw.failed[windowKey{r.Topic, string(r.Key)}]
	fw.mu.Unlock()
	return ok && r.Received.After(w.from) && !r.Received.After(w.to)
}

// prune forgets failures older than keep: by then every QoS 1/2 record
// received before them has expired.
func (fw *failWindows) prune(now time.Time) {
	if fw.n.Load() == 0 {
		return
	}
	fw.mu.Lock()
	for k, w := range fw.failed {
		if now.Sub(w.to) > fw.keep {
			delete(fw.failed, k)
			fw.n.Add(-1)
		}
	}
	fw.mu.Unlock()
}

// errBehindFailure is the error of a record failed because an earlier one
// of its key failed (to keep the key's order).
func errBehindFailure(r *Record) error {
	return fmt.Errorf("%w: an earlier record of key %q failed; refused to keep the order (resend in order)", ErrKafkaUnavailable, r.Key)
}
