package reverse

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestInflightOrderCommitRule: what the committer reads of the redelivery
// order. Every delivery put in flight is numbered; a resend (DUP) keeps its
// number; the oldest delivery still in flight to a clean session bounds
// what may be committed, and deliveries to persistent sessions never do.
func TestInflightOrderCommitRule(t *testing.T) {
	o := NewInflightOrder(mqtt.New(nil))
	clean := &mqtt.Client{ID: "clean"}
	clean.Properties.ProtocolVersion, clean.Properties.Clean = 4, true
	kept := &mqtt.Client{ID: "kept"}
	kept.Properties.ProtocolVersion = 4
	publish := func(cl *mqtt.Client, pid uint16, dup bool) {
		o.OnQosPublish(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Dup: dup}, PacketID: pid}, 0, 0)
	}
	none := ^uint64(0)
	if got := o.oldestVolatile(); got != none {
		t.Fatalf("nothing in flight: oldest volatile %d, want the maximum", got)
	}
	publish(kept, 1, false)  // 1
	publish(clean, 7, false) // 2
	publish(clean, 8, false) // 3
	publish(clean, 7, true)  // a resend: still 2
	if got := o.last(); got != 3 {
		t.Fatalf("last = %d, want 3", got)
	}
	if got := o.oldestVolatile(); got != 2 {
		t.Fatalf("oldest volatile = %d, want 2 (the persistent session's 1 does not count)", got)
	}
	o.OnQosComplete(clean, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 7})
	if got := o.oldestVolatile(); got != 3 {
		t.Fatalf("after the PUBACK of 7: oldest volatile = %d, want 3", got)
	}
	o.OnQosDropped(clean, packets.Packet{PacketID: 8})
	if got := o.oldestVolatile(); got != none {
		t.Fatalf("after the drop of 8: oldest volatile = %d, want the maximum", got)
	}
	o.PutInFlight(clean, 9) // a replay's own delivery
	if got, want := o.oldestVolatile(), uint64(4); got != want {
		t.Fatalf("after PutInFlight: oldest volatile = %d, want %d", got, want)
	}
	o.TakenOutOfFlight(clean, 9)
	if got := o.oldestVolatile(); got != none {
		t.Fatalf("after TakenOutOfFlight: oldest volatile = %d, want the maximum", got)
	}
}
