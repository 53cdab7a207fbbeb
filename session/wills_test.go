package session

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

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
