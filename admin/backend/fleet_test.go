package backend

import (
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/instance"
)

// TestFleet: the instance list shows the live instances of this cluster
// by id: not another cluster's (another sessions topic), not one whose
// last heartbeat says it stopped, not one unheard for the lapse, and of
// two runs of one id the newest.
func TestFleet(t *testing.T) {
	f := NewFleet("_ferry_sessions", time.Hour)
	t0 := time.Now().Add(-time.Minute)
	f.Saw("b", instance.Heartbeat{Nonce: "b1", Host: "hb", Started: t0, Sessions: "_ferry_sessions"})
	f.Saw("a", instance.Heartbeat{Nonce: "a1", Host: "ha", Started: t0}) // "": a version that does not say
	f.Saw("other", instance.Heartbeat{Nonce: "o1", Started: t0, Sessions: "_other_sessions"})
	f.Saw("gone", instance.Heartbeat{Nonce: "g1", Started: t0, Stopped: true})
	f.Saw("b", instance.Heartbeat{Nonce: "b0", Host: "old", Started: t0.Add(-time.Hour)}) // an older run of b
	live := f.live()
	if len(live) != 2 || live[0].ID != "a" || live[1].ID != "b" || live[1].Host != "hb" {
		t.Fatalf("live = %+v, want a, then b of host hb", live)
	}
	f.lapse = 0
	time.Sleep(time.Millisecond)
	if live := f.live(); len(live) != 0 {
		t.Fatalf("live after the lapse = %+v, want none", live)
	}
}
