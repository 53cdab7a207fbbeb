package state

import (
	"testing"
	"time"
)

// TestSessionExpiresAt: a disconnected session expires its interval after
// it went, capped by the server's maximum (0: no cap); a connected one
// never does.
func TestSessionExpiresAt(t *testing.T) {
	went := time.UnixMilli(1_000_000)
	s := &Session{Disconnected: went.UnixMilli(), Expiry: 30}
	for _, c := range []struct {
		limit uint32
		want  time.Time
	}{{0, went.Add(30 * time.Second)}, {60, went.Add(30 * time.Second)}, {10, went.Add(10 * time.Second)}} {
		if got := s.ExpiresAt(c.limit); got != c.want.UnixMilli() {
			t.Errorf("expiry 30 s, limit %d: expires at %d, want %d", c.limit, got, c.want.UnixMilli())
		}
		if s.Expired(c.want, c.limit) || !s.Expired(c.want.Add(time.Millisecond), c.limit) {
			t.Errorf("limit %d: Expired is wrong around %v", c.limit, c.want)
		}
	}
	on := &Session{Connected: true, Expiry: 30}
	if on.ExpiresAt(10) != 0 || on.Expired(time.Now().Add(time.Hour), 10) {
		t.Error("a connected session expires")
	}
}
