package session

import (
	"slices"
	"time"
)

// The willKeeper's view of the instances: the last heartbeat read of each
// (beat), which are alive, and the live members of this cluster that
// rendezvous hashing chooses among (see willKeeper).

// instanceBeat is the last heartbeat read of one instance.
type instanceBeat struct {
	at       time.Time // when it was read, on this instance's clock
	stopped  bool
	sessions string // its sessions topic ("" from a version that does not say)
}

// beat records a heartbeat read from _ferry_instances (the caller's
// reader goroutine: Engine.Beat).
func (w *willKeeper) beat(id string, hb Heartbeat, own bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.beats[id] = instanceBeat{at: now, stopped: hb.Stopped, sessions: hb.SessionsTopic}
	if own && !hb.Stopped {
		if w.ownFirst.IsZero() {
			w.ownFirst = now
		}
		w.ownLast = now
	}
}

// ready: this instance reads its own heartbeats back, so the others'
// silence means something (w.mu held).
func (w *willKeeper) ready(now time.Time) bool {
	return !w.ownFirst.IsZero() && now.Sub(w.ownLast) <= w.lapse/2
}

// alive reports whether instance id counts as alive at now (w.mu held).
func (w *willKeeper) alive(id string, now time.Time) bool {
	if id == w.id {
		return true
	}
	b, ok := w.beats[id]
	if !ok {
		return now.Sub(w.ownFirst) <= w.lapse
	}
	return !b.stopped && now.Sub(b.at) <= w.lapse
}

// lastHeard is when instance id was last heard from (w.mu held).
func (w *willKeeper) lastHeard(id string) time.Time {
	if b, ok := w.beats[id]; ok {
		return b.at
	}
	return w.ownFirst
}

// members are the candidates to act for a dead owner: the live instances
// of this cluster (same sessions topic), sorted. Liveness itself counts any
// heartbeat of an id (w.mu held).
func (w *willKeeper) members(now time.Time) []string {
	live := []string{w.id}
	for id, b := range w.beats {
		if id != w.id && b.sessions == w.sessions && w.alive(id, now) {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	return live
}
