package mochipatch

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
)

// droppedHook records the deliveries mochi reports as dropped.
type droppedHook struct {
	mqtt.HookBase
	mu      sync.Mutex
	dropped []string
}

func (*droppedHook) ID() string           { return "dropped" }
func (*droppedHook) Provides(b byte) bool { return b == mqtt.OnPublishDropped }
func (h *droppedHook) OnPublishDropped(_ *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	h.dropped = append(h.dropped, string(pk.Payload))
	h.mu.Unlock()
}

// TestInflightCapDropCallsOnPublishDropped: a QoS 1 delivery to a client
// that already has MaximumInflight deliveries unacknowledged is refused,
// and the hooks hear of it through OnPublishDropped, as they do of a
// delivery dropped from a full write queue. Upstream refused it with no
// hook ("// add hook?"): a hook keeping the message owed (Ferry's session
// engine) could not know, and the session lost it.
func TestInflightCapDropCallsOnPublishDropped(t *testing.T) {
	s := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Options.Capabilities.MaximumInflight = 2
	h := &droppedHook{}
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	cl := s.NewClient(&captureConn{}, "test", "sub", false)
	cl.Properties.ProtocolVersion = 4
	s.Clients.Add(cl)
	sub := packets.Subscription{Filter: "a/b", Qos: 1}
	cl.State.Subscriptions.Add(sub.Filter, sub)
	s.Topics.Subscribe(cl.ID, sub)
	for _, p := range []string{"m0", "m1", "m2", "m3"} {
		if err := s.Publish("a/b", []byte(p), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := cl.State.Inflight.Len(); n != 2 {
		t.Fatalf("%d deliveries in flight, want the cap, 2", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.dropped) != 2 || h.dropped[0] != "m2" || h.dropped[1] != "m3" {
		t.Fatalf("OnPublishDropped heard of %q, want the two refused by the in-flight cap [m2 m3]", h.dropped)
	}
}
