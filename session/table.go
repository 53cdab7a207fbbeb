package session

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// Reading the sessions table: every record as the table's reader reads it
// (onChange) and what it means for the sessions this instance owns (a
// takeover, a former owner's write to repair on sight, its own late write
// of a session ended since); one record on demand (lookup); which records
// the table keeps in memory (servedHere); whether a session is this
// instance's to end (owns).

// onChange sees every record of the sessions table as it is read
// (the table's reader goroutine).
func (h *sessionHook) onChange(c state.Change) {
	var rec *state.Session
	if c.Value != nil {
		var err error
		// Its head is all this reads (takeovers, Wills, lost sessions).
		if rec, err = state.DecodeSessionHead(c.Value); err != nil {
			h.logs.Warn("decode:"+c.Key, "unreadable session record ignored", "client", c.Key, "offset", c.Offset, "err", err)
			return
		}
	}
	h.admit.saw(c.Key, rec)
	h.mu.Lock()
	o := h.owned[c.Key]
	var epoch int64
	if o != nil {
		epoch = o.rec.Epoch
	}
	establishing := h.establishing[c.Key] > 0
	h.mu.Unlock()
	if c.Superseded {
		// A write of this instance already stands for the key: all this
		// record can tell is that a newer owner claimed the session first.
		if o != nil && rec != nil && rec.Epoch > epoch {
			h.takenOver(o, rec)
		}
		h.lost.saw(c.Key, rec, h.id)
		return
	}
	if h.wills != nil {
		h.wills.saw(c.Key, rec)
	}
	if rec != nil && o == nil && rec.Owner == h.id {
		if stale, ended := h.lost.stale(c.Key, rec); stale {
			// Our own late write after a takeover; the new owner repairs it
			// while it holds the session, and if it ended it, so do we.
			if ended {
				h.endStale(c.Key)
			}
			return
		}
	}
	h.lost.saw(c.Key, rec, h.id)
	switch {
	case o == nil:
		// Not ours. A copy this broker still holds of the session (an
		// offline session loaded at start) is stale now.
		// A connection of the id establishing here decides about that copy
		// itself (it read the table to its end: what it resumes is at least
		// as new as this record).
		if (rec == nil || rec.Owner != h.id) && !establishing {
			h.dropLocal(c.Key, nil, false)
		}
	case rec != nil && rec.Owner == h.id && rec.Epoch == epoch:
		// our own write, read back
	case rec != nil && rec.Epoch > epoch:
		h.takenOver(o, rec)
	default:
		// A former owner's write (lower epoch, or its tombstone) landed
		// after our claim: ours again.
		go h.repair(o)
	}
}

// takenOver forgets o: a newer connection claimed its session (rec).
func (h *sessionHook) takenOver(o *ownedSession, rec *state.Session) {
	h.mu.Lock()
	if h.owned[rec.Client] == o {
		delete(h.owned, rec.Client)
	}
	h.mu.Unlock()
	h.lost.lost(rec.Client, rec.Epoch, time.Now())
	h.metrics.takenOver.Inc()
	h.log.Debug("session taken over by a newer connection", "client", rec.Client, "owner", rec.Owner, "epoch", rec.Epoch)
	h.dropLocal(rec.Client, o.cl, true)
}

// endStale deletes again a session its new owner ended, which a late write
// of this instance brought back (lostSessions).
func (h *sessionHook) endStale(id string) {
	h.writeAsync(id, nil, "late", "could not delete a late write of an ended session", h.metrics.repaired.Inc)
}

// owns reports whether this instance owns client's session now (its
// record is this instance's to end).
func (h *sessionHook) owns(client string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owned[client] != nil
}

func (h *sessionHook) repair(o *ownedSession) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if err := h.update(o, func(*state.Session) {}); err != nil {
		h.logs.Warn("repair:"+o.rec.Client, "could not overwrite a stale session record", "client", o.rec.Client, "err", err)
		return
	}
	h.metrics.repaired.Inc()
}

// lookup is the id's session record as this instance has read it (from
// Kafka again when the table does not keep it in memory: servedHere); an
// error only when that read failed.
func (h *sessionHook) lookup(ctx context.Context, id string) (*state.Session, error) {
	v, ok, err := h.table.Read(ctx, id)
	if err != nil || !ok {
		return nil, err
	}
	rec, err := state.DecodeSession(v)
	if err != nil {
		h.logs.Warn("decode:"+id, "unreadable session record: starting a new session", "client", id, "err", err)
		return nil, nil
	}
	if rec.Owner == h.id {
		if stale, ended := h.lost.stale(id, rec); stale && ended {
			return nil, nil // our late write of a session ended since (onChange deletes it)
		}
	}
	return rec, nil
}

// servedHere is the sessions table's Keep: a record stays in memory when
// it says its client is connected to this instance (it is read on every
// CONNECT, disconnect and checkpoint of the session). A cheap look at the
// encoded record: a false positive only keeps a record, a miss reads it
// from Kafka.
func servedHere(instance string) func([]byte) bool {
	id, _ := json.Marshal(instance)
	owner := append([]byte(`"owner":`), id...)
	connected := []byte(`"connected":true`)
	return func(v []byte) bool {
		if head, ok := recordHead(v); ok {
			v = head
		}
		return bytes.Contains(v, owner) && bytes.Contains(v, connected)
	}
}
