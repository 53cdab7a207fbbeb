package mochipatch

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestInflightReusesItsPackets: a packet put in flight and acknowledged
// costs no allocation (upstream's map allocated each 800-byte packet on
// its own: a sixth of an instance's allocated bytes in a reconnect storm),
// and what an Inflight hands out, or a Clone holds, is a copy that a later
// packet does not change.
func TestInflightReusesItsPackets(t *testing.T) {
	pk := func(id uint16, payload string) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			TopicName: "fleet/dev42/temp", Payload: []byte(payload)}
	}
	in := mqtt.NewInflights()
	if !in.Set(pk(1, "first")) {
		t.Fatal("a new id: Set says it was there")
	}
	got, _ := in.Get(1)
	clone := in.Clone()
	if in.Set(pk(1, "again")) {
		t.Fatal("an id in flight: Set says it was new")
	}
	if !in.Delete(1) || in.Delete(1) {
		t.Fatal("Delete does not say whether the id was there")
	}
	in.Set(pk(2, "second")) // takes the packet id 1 gave back
	if c, ok := clone.Get(1); !ok || string(c.Payload) != "first" || c.PacketID != 1 {
		t.Errorf("the clone's packet 1 changed: %q id %d (%v)", c.Payload, c.PacketID, ok)
	}
	if string(got.Payload) != "first" || got.PacketID != 1 {
		t.Errorf("a packet Get returned changed: %q id %d", got.Payload, got.PacketID)
	}
	if all := in.GetAll(false); len(all) != 1 || string(all[0].Payload) != "second" {
		t.Errorf("GetAll: %v", all)
	}
	if raceEnabled {
		t.Log("allocations not counted under -race: sync.Pool drops a quarter of what is put back")
		return
	}
	p := pk(3, "x")
	if n := testing.AllocsPerRun(200, func() { in.Set(p); in.Delete(3) }); n > 0 {
		t.Errorf("a packet put in flight and deleted: %v allocations, want 0", n)
	}
}
