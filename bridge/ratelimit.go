package bridge

import (
	"log/slog"
	"time"

	"github.com/ferry-bridge/ferry/internal/ratelimit"
)

// rateLimiter logs at most one line per key and interval (package
// internal/ratelimit, shared with the session engine).
type rateLimiter = ratelimit.Limiter

func newRateLimiter(log *slog.Logger, interval time.Duration) *rateLimiter {
	return ratelimit.New(log, interval)
}
