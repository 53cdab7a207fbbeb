package bridge

import (
	"log/slog"
	"sync"
	"time"
)

// rateLimiter logs at most one line per key and interval, counting what it
// suppressed, so that one misbehaving topic or client cannot flood the log.
type rateLimiter struct {
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]entry
}

type entry struct {
	at         time.Time
	suppressed int
}

const rateLimiterKeys = 10000

func newRateLimiter(log *slog.Logger, interval time.Duration) *rateLimiter {
	return &rateLimiter{log: log, interval: interval, last: make(map[string]entry)}
}

// Warn logs msg unless key was logged within the interval.
func (r *rateLimiter) Warn(key, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	e, ok := r.last[key]
	if ok && now.Sub(e.at) < r.interval {
		e.suppressed++
		r.last[key] = e
		r.mu.Unlock()
		return
	}
	if len(r.last) >= rateLimiterKeys {
		clear(r.last) // bounded memory; worst case a few extra lines
	}
	r.last[key] = entry{at: now}
	r.mu.Unlock()
	if e.suppressed > 0 {
		args = append(args, "suppressed_since_last", e.suppressed)
	}
	r.log.Warn(msg, args...)
}
