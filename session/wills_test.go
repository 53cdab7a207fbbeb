package session

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// TestChooseInstanceRendezvous: every caller picks the same instance for a
// key whatever the order of the ids; keys spread over the instances; when
// one instance leaves, only its keys move.
func TestChooseInstanceRendezvous(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	count := map[string]int{}
	for i := range 4000 {
		k := fmt.Sprintf("client-%d", i)
		got := ChooseInstance(k, ids)
		if rev := ChooseInstance(k, []string{"d", "c", "b", "a"}); rev != got {
			t.Fatalf("%s: %s or %s depending on the order of ids", k, got, rev)
		}
		count[got]++
		if after := ChooseInstance(k, []string{"a", "b", "d"}); got != "c" && after != got {
			t.Fatalf("%s moved from %s to %s when c left", k, got, after)
		}
	}
	for _, id := range ids {
		if count[id] < 800 || count[id] > 1200 {
			t.Fatalf("keys per instance %v: uneven", count)
		}
	}
}

// TestWillFenceOrder: a pending Will goes ahead only when its own fence is
// read before any other record of the client; the dead owner's own late
// records before it do not count, any other record does.
func TestWillFenceOrder(t *testing.T) {
	w := newWillKeeper(slog.New(slog.DiscardHandler), "me", "s", time.Now(), 2*time.Second, time.Second, nil, nil)
	start := func() *pendingWill {
		p := &pendingWill{epoch: 10, owner: "dead", mine: make(chan struct{}), cancel: make(chan struct{})}
		w.pending["k"] = p
		return p
	}
	fence := func(by string) *state.Session { return &state.Session{Owner: "dead", Epoch: 11, WillBy: by} }
	closed := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	cases := []struct {
		name         string
		recs         []*state.Session
		mine, cancel bool
	}{
		{"own fence", []*state.Session{fence("me")}, true, false},
		{"owner's late write, then own fence", []*state.Session{{Owner: "dead", Epoch: 10, Connected: true}, fence("me")}, true, false},
		{"another survivor's fence first", []*state.Session{fence("other"), fence("me")}, false, true},
		{"another survivor's fence after ours", []*state.Session{fence("me"), fence("other")}, true, false},
		{"the client's claim first", []*state.Session{{Owner: "c", Epoch: 20, Connected: true}, fence("me")}, false, true},
		{"the client's claim after our fence", []*state.Session{fence("me"), {Owner: "c", Epoch: 20, Connected: true}}, true, true},
		{"a tombstone first", []*state.Session{nil, fence("me")}, false, true},
	}
	for _, c := range cases {
		p := start()
		for _, r := range c.recs {
			w.saw("k", r)
		}
		if closed(p.mine) != c.mine || closed(p.cancel) != c.cancel {
			t.Errorf("%s: own fence seen %v, cancelled %v; want %v, %v", c.name, closed(p.mine), closed(p.cancel), c.mine, c.cancel)
		}
	}
}

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
