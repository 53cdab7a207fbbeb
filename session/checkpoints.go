package session

import (
	"sync"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// The checkpoints of the sessions this instance owns: every
// checkpointEvery, the moved positions (or stale horizon) of each connected
// session are written, and an offline session past its expiry is ended.

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
