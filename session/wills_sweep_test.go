package session

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// TestExpiredSessionChoice: the records an instance's sweep deletes are
// the disconnected sessions past their expiry (capped by
// mqtt.max_session_expiry) whose owner is dead, or is this instance
// without holding them; not a live owner's, not one whose Will is being
// handled.
func TestExpiredSessionChoice(t *testing.T) {
	now := time.Now()
	w := newWillKeeper(slog.New(slog.DiscardHandler), "me", "s", now, 2*time.Second, time.Second, nil, nil)
	w.maxExpiry = 60
	w.beat("me", Heartbeat{SessionsTopic: "s"}, true)
	w.beat("live", Heartbeat{SessionsTopic: "s"}, false)
	w.beat("dead", Heartbeat{SessionsTopic: "s", Stopped: true}, false)
	gone := func(owner string, ago time.Duration, expiry uint32) *state.Session {
		return &state.Session{Owner: owner, Epoch: 1, Disconnected: now.Add(-ago).UnixMilli(), Expiry: expiry}
	}
	recs := map[string]*state.Session{
		"own":            gone("me", time.Minute, 30),
		"own-fresh":      gone("me", 10*time.Second, 30),
		"live-owner":     gone("live", time.Hour, 30),
		"dead-owner":     gone("dead", time.Minute, 30),
		"dead-fresh":     gone("dead", 10*time.Second, 30),
		"dead-capped":    gone("dead", 2*time.Minute, 99999), // 60 s by the cap
		"dead-connected": {Owner: "dead", Epoch: 1, Connected: true},
		"dead-pending":   gone("dead", time.Minute, 30),
	}
	for k, r := range recs {
		w.saw(k, r)
	}
	w.pending["dead-pending"] = &pendingWill{mine: make(chan struct{}), cancel: make(chan struct{})}
	// Every dead owner's key this instance is not chosen for is another
	// live instance's to delete.
	live := []string{"live", "me"}
	want := map[string]bool{"own": true}
	for _, k := range []string{"dead-owner", "dead-capped"} {
		want[k] = ChooseInstance(k, live) == "me"
	}
	got := w.expiredDue(now)
	for k := range recs {
		if _, ok := got[k]; ok != want[k] {
			t.Errorf("%s: chosen for deletion %v, want %v", k, ok, want[k])
		}
	}
	w.saw("own", nil)
	if _, ok := w.expiredDue(now)["own"]; ok {
		t.Error("a deleted record is still chosen")
	}
}
