package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// The willKeeper's expiry sweep: deleting the records of disconnected
// sessions past their expiry that no live instance ends (see willKeeper).

// offRef is a disconnected session: who owned it and when it expires.
type offRef struct {
	owner   string
	epoch   int64
	expires int64 // unix ms
}

// maxSweep bounds the records one sweep deletes (the next takes the rest).
const maxSweep = 500

// sweep starts deleting the records of expired sessions no live instance
// ends (see willKeeper): disconnected, past their expiry, and owned by a
// dead instance (this instance chosen among the live ones) or by this one
// without it holding the session. One sweep runs at a time.
func (w *willKeeper) sweep(now time.Time) {
	if !w.sweeping.CompareAndSwap(false, true) {
		return
	}
	due := w.expiredDue(now)
	for k, r := range due {
		if r.owner == w.id && w.owns != nil && w.owns(k) {
			delete(due, k) // the session hook ends it
		}
	}
	if len(due) == 0 {
		w.sweeping.Store(false)
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.sweeping.Store(false)
		w.expire(due)
	}()
}

// expiredDue are the expired sessions this instance is to delete, at most
// maxSweep (the next sweep takes the rest), before those it holds are left
// out.
func (w *willKeeper) expiredDue(now time.Time) map[string]offRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ready(now) {
		return nil
	}
	live := w.members(now)
	due := make(map[string]offRef)
	for k, r := range w.offline {
		if len(due) == maxSweep {
			break
		}
		switch {
		case r.expires >= now.UnixMilli() || w.pending[k] != nil:
			// not yet; or a dead owner's session whose Will is being handled
		case r.owner == w.id:
			due[k] = r
		case w.alive(r.owner, now):
			// its owner ends it
		case ChooseInstance(k, live) == w.id:
			due[k] = r
		}
	}
	return due
}

// expire reads the table to its end and deletes each record of due that
// is still the one chosen and expired, waiting for Kafka's answers. The
// tombstone is unconditional (Kafka has no compare-and-set): a claim of
// the session written between the check and the tombstone lands before
// it, and its owner, which holds the session from before its claim,
// writes its record again on reading the tombstone (onChange: repair on
// sight), subscriptions and positions with it
// (TestSweepTombstoneAfterClaimRepaired).
func (w *willKeeper) expire(due map[string]offRef) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*w.timeout)
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := w.table.Sync(ctx); err != nil {
		w.log.Debug("expired sessions: table not read to its end (retried)", "err", err)
		return
	}
	now := time.Now()
	var deleted, failed atomic.Int32
	var wg sync.WaitGroup
	for k, r := range due {
		cur := w.lookup(ctx, k)
		if cur == nil || cur.Owner != r.owner || cur.Epoch != r.epoch || !cur.Expired(now, w.maxExpiry) ||
			cur.Owner == w.id && w.owns != nil && w.owns(k) {
			continue
		}
		wg.Add(1)
		w.table.WriteAsync(k, nil, func(err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			deleted.Add(1)
		})
		w.log.Debug("expired session deleted", "client", k, "owner", r.owner, "disconnected", time.UnixMilli(cur.Disconnected),
			"expiry", min(cur.Expiry, w.maxExpiry))
	}
	written := make(chan struct{})
	go func() {
		wg.Wait()
		close(written)
	}()
	select {
	case <-written:
	case <-ctx.Done():
	}
	if n := deleted.Load(); n > 0 {
		w.log.Info("deleted the records of expired sessions whose owner is gone", "sessions", n)
	}
	if n := failed.Load(); n > 0 {
		w.log.Warn("records of expired sessions not deleted (retried)", "sessions", n)
	}
}

// expiresAt is when (unix ms) rec, disconnected, expires; 0: a tombstone,
// or connected.
func expiresAt(rec *state.Session, limit uint32) int64 {
	if rec == nil {
		return 0
	}
	return rec.ExpiresAt(limit)
}
