package session

import (
	"sync"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// lostSessions remembers, for a while, the sessions this instance was taken
// over from. A write of this instance may pass its ownership check just
// before it reads the newer claim and land after it (a disconnect record,
// a checkpoint): a former owner's late write. While the new owner holds the
// session it repairs such a write on sight; once the new owner has ended
// the session (a clean start, an expiry) nobody holds it, and the late
// write would bring the ended session back. The former owner recognises
// its own late write by its epoch, lower than the claim it lost to, and
// deletes it again; until then its lookups treat it as absent.
type lostSessions struct {
	keep time.Duration

	mu sync.Mutex
	m  map[string]lostSession
}

type lostSession struct {
	epoch int64     // the newest epoch of another owner read since
	ended bool      // the others' last word is a tombstone
	at    time.Time // when it was lost (forgotten after keep)
}

func newLostSessions(keep time.Duration) *lostSessions {
	return &lostSessions{keep: keep, m: make(map[string]lostSession)}
}

// lost records that another owner claimed id with epoch.
func (l *lostSessions) lost(id string, epoch int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[id]; ok && e.epoch >= epoch {
		return
	}
	l.m[id] = lostSession{epoch: epoch, at: now}
}

// saw follows what others write of a lost session (self: this instance).
func (l *lostSessions) saw(id string, rec *state.Session, self string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[id]
	switch {
	case !ok:
	case rec == nil:
		e.ended = true
		l.m[id] = e
	case rec.Owner != self && rec.Epoch >= e.epoch:
		e.epoch, e.ended = rec.Epoch, false
		l.m[id] = e
	}
}

// stale reports whether rec, a record of this instance, is a late write of
// a session it has lost since; ended: the session's new owner ended it.
func (l *lostSessions) stale(id string, rec *state.Session) (stale, ended bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[id]
	if !ok || rec.Epoch >= e.epoch {
		return false, false
	}
	return true, e.ended
}

// forget drops what is older than keep: a late write lands within the
// write timeout of its start.
func (l *lostSessions) forget(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, e := range l.m {
		if now.Sub(e.at) > l.keep {
			delete(l.m, id)
		}
	}
}
