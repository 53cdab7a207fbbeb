package mochipatch

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestHeldBackDeliveryStaysInFlight (FERRY.md "edges 10"): a QoS 2
// message the server held back for the client's Receive Maximum is, once
// sent, in flight like any other: the client's PUBREC gets PUBREL 0x00 and
// its PUBCOMP ends it. MQTT 5 4.9: "The Server ... MUST NOT send more
// than Receive Maximum QoS 1 and QoS 2 PUBLISH packets for which it has
// not received PUBACK, PUBCOMP, or PUBREC with a Reason Code of 128 or
// greater" [MQTT-3.3.4-9], and a PUBREC for a packet in flight is answered
// by PUBREL [MQTT-4.3.3-4]; 0x92 Packet Identifier not found is for an id
// the server has no state of. Upstream sent the held message and deleted
// it from flight at once: its PUBREC got 0x92 and the exchange never
// completed (a QoS 1 one's PUBACK was ignored, its send quota lost).
func TestHeldBackDeliveryStaysInFlight(t *testing.T) {
	s := edgeServer(t)
	sub := dialRaw(t, s, 5, packets.Packet{Connect: packets.ConnectParams{Clean: true, Keepalive: 30, ClientIdentifier: "held"},
		Properties: packets.Properties{ReceiveMaximum: 1}})
	if ack := sub.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("connect: %d %#x", ack.FixedHeader.Type, ack.ReasonCode)
	}
	sub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "held/t", Qos: 2}}})
	sub.next(time.Second) // SUBACK
	sub.pump()
	pub := connected(t, s, 5, "pub")
	for i, m := range []string{"first", "second"} {
		id := uint16(i + 1)
		pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, PacketID: id, TopicName: "held/t", Payload: []byte(m)})
		pub.next(time.Second) // PUBREC
		pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: id})
		pub.next(time.Second) // PUBCOMP
	}
	for _, want := range []string{"first", "second"} {
		pk := sub.next(time.Second)
		if pk.FixedHeader.Type != packets.Publish || string(pk.Payload) != want || pk.FixedHeader.Qos != 2 {
			t.Fatalf("expected %s at QoS 2, got type %d %q QoS %d", want, pk.FixedHeader.Type, pk.Payload, pk.FixedHeader.Qos)
		}
		// "second" was held back until this exchange of "first" ended.
		sub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
		rel := sub.next(time.Second)
		if rel.FixedHeader.Type != packets.Pubrel || rel.PacketID != pk.PacketID || rel.ReasonCode != 0 {
			t.Fatalf("PUBREC of %s (id %d): got type %d id %d reason %#x, want PUBREL 0x00", want, pk.PacketID,
				rel.FixedHeader.Type, rel.PacketID, rel.ReasonCode)
		}
		sub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: pk.PacketID})
	}
	waitInflight := time.Now().Add(time.Second)
	for {
		cl, ok := s.Clients.Get("held")
		if ok && cl.State.Inflight.Len() == 0 {
			break
		}
		if time.Now().After(waitInflight) {
			t.Fatalf("deliveries still in flight after both exchanges completed")
		}
		time.Sleep(time.Millisecond)
	}
}
