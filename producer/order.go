package producer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// keyOrder keeps order per Kafka key when a record fails. When a QoS 1/2
// record of key K received at r fails or expires at time t, every record of
// K received in (r, t] is still behind it in the pipeline (ring or partition
// queue): sending one of them would let it overtake the failed record,
// which its client resends. Those records fail too; records of other keys,
// records of K received before r (ahead of it) or after t are not affected.
//
// A record refused because it is too large on its own does not block its
// key: it can never be written, so nothing overtakes a resend of it.
//
// Safe for concurrent use: the producer and the hook's ring eviction both
// report failures. The hot path costs one atomic load while nothing failed.
type keyOrder struct {
	keep time.Duration // how long a failure is remembered

	n      atomic.Int64 // entries in failed; 0 = fast path
	mu     sync.Mutex
	failed map[orderKey]window
}

// window is (from, to]: records received in it fail. Failures of one key
// merge into one window (it may cover a little more than needed, never less).
type window struct{ from, to time.Time }

type orderKey struct{ topic, key string }

func newKeyOrder(keep time.Duration) *keyOrder {
	return &keyOrder{keep: keep, failed: make(map[orderKey]window)}
}

// fail records that a QoS 1/2 record of r's key failed now.
func (o *keyOrder) fail(r *Record, now time.Time) {
	if r.Done == nil {
		return // QoS 0 is best effort: its loss does not hold back others
	}
	k := orderKey{r.Topic, string(r.Key)}
	w := window{from: r.Received, to: now}
	o.mu.Lock()
	if old, ok := o.failed[k]; !ok {
		o.n.Add(1)
	} else {
		if old.from.Before(w.from) {
			w.from = old.from
		}
		if old.to.After(w.to) {
			w.to = old.to
		}
	}
	o.failed[k] = w
	o.mu.Unlock()
}

// blocked reports whether r must fail because an earlier record of its key
// failed after r was received.
func (o *keyOrder) blocked(r *Record) bool {
	if o.n.Load() == 0 {
		return false
	}
	o.mu.Lock()
	w, ok := o.failed[orderKey{r.Topic, string(r.Key)}]
	o.mu.Unlock()
	return ok && r.Received.After(w.from) && !r.Received.After(w.to)
}

// prune forgets failures older than keep: by then every QoS 1/2 record
// received before them has expired.
func (o *keyOrder) prune(now time.Time) {
	if o.n.Load() == 0 {
		return
	}
	o.mu.Lock()
	for k, w := range o.failed {
		if now.Sub(w.to) > o.keep {
			delete(o.failed, k)
			o.n.Add(-1)
		}
	}
	o.mu.Unlock()
}

// errOrder is the error of a record failed to keep its key's order.
func errOrder(r *Record) error {
	return fmt.Errorf("%w: an earlier record of key %q failed; refused to keep the order (resend in order)", ErrKafkaUnavailable, r.Key)
}
