package session

import (
	"context"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// Writing session records (a claim, an owned session's updates, its end):
// each write counted, a failure logged.

// end deletes an owned session's record (o.wmu held).
func (h *sessionHook) end(o *ownedSession) {
	h.mu.Lock()
	if h.owned[o.rec.Client] != o {
		h.mu.Unlock()
		return
	}
	delete(h.owned, o.rec.Client)
	h.mu.Unlock()
	// Not waited for: ending a session promises the client nothing, and a
	// disconnect must not wait for an unreachable Kafka. Writes of one key
	// keep their order, so it lands after the claim.
	h.writeAsync(o.rec.Client, nil, "end", "session end not written to Kafka", nil)
}

// writeAsync writes id's record (nil: a tombstone) without waiting for
// Kafka, counts the outcome, logs a failure as msg (rate-limited per kind
// and client) and calls ok, if not nil, once the write is acknowledged.
func (h *sessionHook) writeAsync(id string, v []byte, kind, msg string, ok func()) {
	h.table.WriteAsync(id, v, func(err error) {
		if err != nil {
			h.metrics.writes.WithLabelValues("error").Inc()
			h.logs.Warn(kind+":"+id, msg, "client", id, "err", err)
			return
		}
		h.metrics.writes.WithLabelValues("ok").Inc()
		if ok != nil {
			ok()
		}
	})
}

// update writes o's record changed by fn, if o still owns the session
// (o.wmu held).
func (h *sessionHook) update(o *ownedSession, fn func(*state.Session)) error {
	h.mu.Lock()
	if h.owned[o.rec.Client] != o {
		h.mu.Unlock()
		return nil // taken over meanwhile: the new owner writes
	}
	rec := o.rec
	rec.Subs = append([]state.Subscription(nil), rec.Subs...)
	before := h.beforeWrite
	h.mu.Unlock()
	var gen uint64
	if o.pos != nil {
		gen = o.pos.fill(&rec)
	}
	fn(&rec)
	if before != nil {
		before(&rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	if err := h.put(ctx, &rec); err != nil {
		return err // still dirty: the next checkpoint tries again
	}
	if o.pos != nil {
		o.pos.wrote(gen)
	}
	h.mu.Lock()
	o.rec = rec
	h.mu.Unlock()
	return nil
}

func (h *sessionHook) putAsync(rec *state.Session) {
	v, err := rec.Encode()
	if err != nil {
		return
	}
	h.writeAsync(rec.Client, v, "claim", "clean session claim not written to Kafka", nil)
}

func (h *sessionHook) put(ctx context.Context, rec *state.Session) error {
	v, err := rec.Encode()
	if err != nil {
		return err
	}
	start := time.Now()
	err = h.table.Put(ctx, rec.Client, v)
	h.metrics.writeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		h.metrics.writes.WithLabelValues("error").Inc()
		return err
	}
	h.metrics.writes.WithLabelValues("ok").Inc()
	return nil
}
