package mochipatch

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// quietServer is a mochi server that logs nothing.
func quietServer() *mqtt.Server {
	return mqtt.New(&mqtt.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// TestClearExpiredInflightsCopiesOnlyTheExpired: the server's once-a-second
// sweep of every client's inflight packets drops the expired ones, oldest
// first, and copies nothing of the others. Upstream copied every inflight
// packet of every client into a sorted slice each second: with 5,000
// clients of 20 in flight (a reconnect storm's replays), 2% of an
// instance's CPU.
func TestClearExpiredInflightsCopiesOnlyTheExpired(t *testing.T) {
	s := quietServer()
	cl := s.NewClient(nil, "test", "c", true)
	now := time.Now().Unix()
	for id := uint16(1); id <= 64; id++ {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			ProtocolVersion: 5, TopicName: "a/b", Created: now - 10 + int64(id%3)}
		cl.State.Inflight.Set(pk)
	}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d := cl.ClearExpiredInflights(now, 0); len(d) != 0 {
				b.Fatalf("dropped %v, none expired", d)
			}
		}
	})
	if n := r.AllocedBytesPerOp(); n > 0 {
		t.Errorf("a sweep of 64 inflight packets, none expired, allocates %d bytes, want 0 (upstream copies all 64: %d bytes)", n, 64*800)
	}
	// 7 and 40 carry an MQTT 5 expiry that has passed; 40 was put in flight first.
	for _, c := range []struct {
		id      uint16
		created int64
	}{{7, now - 5}, {40, now - 8}} {
		pk, _ := cl.State.Inflight.Get(c.id)
		pk.Expiry, pk.Created = now-1, c.created
		cl.State.Inflight.Set(pk)
	}
	if d := cl.ClearExpiredInflights(now, 0); !slices.Equal(d, []uint16{40, 7}) {
		t.Errorf("dropped %v, want [40 7] (oldest first)", d)
	}
	if n := cl.State.Inflight.Len(); n != 62 {
		t.Errorf("%d in flight after the sweep, want 62", n)
	}
	// The server's maximum message expiry drops nothing that asked none
	// (FERRY.md change 10 (expiry)).
	if d := cl.ClearExpiredInflights(now, 9); len(d) != 0 {
		t.Errorf("with a maximum expiry of 9 s: %d dropped, want none (none asked an expiry)", len(d))
	}
}

// TestNextPacketIDSkipsIDsInFlight: the next packet id is the first free
// one after the last given out. Ferry's NextPacketID asks whether an id is
// in flight without copying the 800-byte packet under it (Inflight.Get
// did, per id tried: 2% of an instance's CPU in a reconnect storm's
// replays); what it returns is unchanged.
func TestNextPacketIDSkipsIDsInFlight(t *testing.T) {
	s := quietServer()
	cl := s.NewClient(nil, "test", "c", true)
	for _, id := range []uint16{1, 2, 4} {
		cl.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id})
	}
	var got []uint32
	for range 3 {
		id, err := cl.NextPacketID()
		if err != nil {
			t.Fatal(err)
		}
		cl.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: uint16(id)})
		got = append(got, id)
	}
	if !slices.Equal(got, []uint32{3, 5, 6}) {
		t.Errorf("next packet ids %v with 1, 2 and 4 in flight, want [3 5 6]", got)
	}
}
