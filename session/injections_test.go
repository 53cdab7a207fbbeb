package session

import (
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// TestInjectionsTakeTurns: two Injections under one client id (a
// publisher's QoS 2 read goroutine and its QoS 1 drainer, or the drainer of
// a connection just taken over next to the new one's) must not see each
// other's coordinate: the second waits until the first ends. When both ran
// at once, a subscriber's delivery of the first message was recorded at the
// second's coordinate, and its acknowledgement moved the session's position
// past messages it never got.
func TestInjectionsTakeTurns(t *testing.T) {
	in := new(Injections)
	first, second := Coord{"a", 0, 7}, Coord{"b", 3, 41}
	in.Begin("pub", first, "")
	began := make(chan struct{})
	go func() {
		in.Begin("pub", second, "")
		close(began)
		if c, ok := in.of("pub"); !ok || c != second {
			t.Errorf("second injection sees %+v, %v", c, ok)
		}
		in.End("pub")
	}()
	// Wait until the second injection has asked for its turn.
	testhelp.WaitFor(t, 5*time.Second, "the second injection to ask for its turn", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.m["pub"].refs == 2
	})
	select {
	case <-began:
		t.Fatal("the second injection under the same client id began while the first ran")
	default:
	}
	if c, ok := in.of("pub"); !ok || c != first {
		t.Fatalf("the first injection sees %+v, %v; want its own coordinate %+v", c, ok, first)
	}
	in.End("pub")
	select {
	case <-began:
	case <-time.After(5 * time.Second):
		t.Fatal("the second injection did not begin after the first ended")
	}
	testhelp.WaitFor(t, 5*time.Second, "no injection slot left after both ended", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return len(in.m) == 0
	})
	if _, ok := in.of("pub"); ok {
		t.Fatal("a coordinate is registered after both Injections ended")
	}
}
