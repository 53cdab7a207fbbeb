// Package ratelimit logs warnings at most once per key and interval,
// counting what it suppressed, so that one misbehaving topic or client
// cannot flood the log. It is shared by the bridge and the session engine.
package ratelimit

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter logs at most one line per key and interval.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]entry
}

type entry struct {
	at         time.Time
	suppressed int
}

// maxKeys bounds the keys remembered: past it they are all forgotten
// (bounded memory; worst case a few extra lines).
const maxKeys = 10000

// New returns a limiter that logs to log at most once per key and interval.
func New(log *slog.Logger, interval time.Duration) *Limiter {
	return &Limiter{log: log, interval: interval, last: make(map[string]entry)}
}

// Warn logs msg unless key was logged within the interval.
func (r *Limiter) Warn(key, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	e, ok := r.last[key]
	if ok && now.Sub(e.at) < r.interval {
		e.suppressed++
		r.last[key] = e
		r.mu.Unlock()
		return
	}
	if len(r.last) >= maxKeys {
		clear(r.last)
	}
	r.last[key] = entry{at: now}
	r.mu.Unlock()
	if e.suppressed > 0 {
		args = append(args, "suppressed_since_last", e.suppressed)
	}
	r.log.Warn(msg, args...)
}
