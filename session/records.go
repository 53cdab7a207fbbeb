package session

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/state"
)

// The session records: writing them (each write counted, a failure
// logged), following the table (onChange: takeover, repair on sight, a
// former owner's late write), the checkpoints of moved positions and the
// expiry of offline sessions this instance owns.

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

// checkpointEvery is how often a connected persistent session's positions
// are written when they moved: what a crash makes a resume deliver twice.
const checkpointEvery = time.Second

// horizonWritesPerTick bounds the records written in one checkpoint for
// the horizon alone (positions.go horizonRefresh): every idle session's
// horizon goes stale at once, and each write waits for Kafka.
const horizonWritesPerTick = 100

// checkpoints writes moved positions every checkpointEvery until stop.
func (h *sessionHook) checkpoints(stop <-chan struct{}) {
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		h.lost.forget(time.Now())
		h.mu.Lock()
		var due, expired []*ownedSession
		stale := 0
		now := time.Now()
		for _, o := range h.owned {
			if o.cl != nil && o.cl.Closed() && o.rec.Expired(now, h.maxExpiry()) {
				expired = append(expired, o)
				continue
			}
			if o.pos == nil || o.cl == nil || o.cl.Closed() {
				continue
			}
			if o.pos.isDirty() {
				due = append(due, o)
			} else if stale < horizonWritesPerTick && o.pos.horizonStale() {
				due = append(due, o)
				stale++
			}
		}
		h.mu.Unlock()
		for _, o := range expired {
			h.expire(o)
		}
		h.checkpoint(due)
	}
}

// checkpointWrites bounds the checkpoint writes on their way at once.
// They go out together: franz-go puts the records produced while a
// request is on its way into the next one, so a round of 10,000 dirty
// sessions takes a few produce requests, not 10,000 round trips one after
// the other (at 3 ms each, a session's position was written every 30 s).
const checkpointWrites = 1024

// checkpoint writes the records of due, at most checkpointWrites at once,
// and returns once each is acknowledged or failed.
func (h *sessionHook) checkpoint(due []*ownedSession) {
	sem := make(chan struct{}, checkpointWrites)
	var wg sync.WaitGroup
	for _, o := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				<-sem
				wg.Done()
			}()
			o.wmu.Lock()
			defer o.wmu.Unlock()
			if err := h.update(o, func(*state.Session) {}); err != nil {
				h.logs.Warn("checkpoint:"+o.rec.Client, "session position not written (a crash redelivers more)", "client", o.rec.Client, "err", err)
			}
		}()
	}
	wg.Wait()
}

// expire ends an offline session this instance owns once its record's
// expiry has passed (checkpoints): mochi's own expiry of the connection
// (OnClientExpired) may come later or never (an MQTT 5 DISCONNECT asking
// for more than mqtt.max_session_expiry changes mochi's interval, not the
// record's). Its record is deleted, and the broker's offline copy goes.
func (h *sessionHook) expire(o *ownedSession) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	h.mu.Lock()
	mine := h.owned[o.rec.Client] == o
	h.mu.Unlock()
	if !mine {
		return // reconnected (or taken over) meanwhile
	}
	h.log.Debug("session expired", "client", o.rec.Client, "expiry", o.rec.Expiry)
	h.end(o)
	h.dropLocal(o.rec.Client, o.cl, false)
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

// recordOf is the claim of cl's connection; keep: the session has state of
// its own (persistent, or resumed), else it is a clean session's claim.
func (h *sessionHook) recordOf(cl *mqtt.Client, keep bool) state.Session {
	rec := state.Session{Client: cl.ID, Owner: h.id, Connected: true, Clean: !keep,
		ProtocolVersion: cl.Properties.ProtocolVersion, Username: cl.Properties.Username, Will: willOf(cl)}
	if rec.Clean {
		// A claim, to fence a second connection of the id; with the Will
		// and its user, for a survivor to check and publish if this
		// instance dies (wills.go), and the user, whose session it is
		// while connected (admission).
		return rec
	}
	rec.Expiry = h.expiryOf(cl)
	rec.Listener = cl.Net.Listener
	rec.Props = propsJSON(cl.Properties.Props)
	return rec
}

// propsJSON is compactJSON of props: nothing for an MQTT 3.1.1 client's
// CONNECT (no properties), without encoding them. Encoding mochi's
// 40-field struct and compacting it again was a twentieth of an instance's
// CPU in a reconnect storm of 3.1.1 clients.
func propsJSON(props packets.Properties) json.RawMessage {
	if reflect.ValueOf(&props).Elem().IsZero() {
		return nil
	}
	b, err := json.Marshal(props.Copy(false))
	if err != nil {
		return nil
	}
	return compactJSON(b)
}

// compactJSON returns the JSON object b without its members of a zero
// value (null, false, 0, "", [], {}), nil when none is left: mochi's
// structs marshal every field, and a 3.1.1 client's properties, all zero,
// were half of its session record (363 of 692 bytes), kept by every
// instance. Unmarshalled into the same struct, the result is the same.
func compactJSON(b []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	for k, v := range m {
		switch string(v) {
		case "null", "false", "0", `""`, "[]", "{}":
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

// expiryOf is the session expiry of cl's session (seconds): MQTT 5 the
// client's (CONNECT, or DISCONNECT when it said one) up to the server's
// maximum, which mochi announces in CONNACK when it is lower; MQTT 3.1.1
// the maximum.
func (h *sessionHook) expiryOf(cl *mqtt.Client) uint32 {
	if cl.Properties.ProtocolVersion == 5 {
		return min(cl.Properties.Props.SessionExpiryInterval, h.maxExpiry())
	}
	return h.maxExpiry()
}

// maxExpiry is mqtt.max_session_expiry in seconds.
func (h *sessionHook) maxExpiry() uint32 {
	return h.server.Options.Capabilities.MaximumSessionExpiryInterval
}

func willOf(cl *mqtt.Client) json.RawMessage {
	if cl.Properties.Will.TopicName == "" {
		return nil
	}
	b, err := json.Marshal(cl.Properties.Will)
	if err != nil {
		return nil
	}
	return compactJSON(b)
}

func epochOf(s *state.Session) int64 {
	if s == nil {
		return 0
	}
	return s.Epoch
}
