package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestEdgesQoS2ResendOnResume (issue 53 item 11, issue 50's PUBREC
// suspicion): a QoS 2 delivery to a persistent session, left
// unacknowledged when its connection goes, is resent when the session
// resumes on a freshly started instance (it knows the session from Kafka
// alone):
//
//   - not acknowledged at all: as a PUBLISH at QoS 2 with DUP 1 and its
//     original packet id. "When a Client reconnects with Clean Session set
//     to 0, both the Client and Server MUST re-send any unacknowledged
//     PUBLISH Packets (where QoS > 0) and PUBREL Packets using their
//     original Packet Identifiers" [MQTT-4.4.0-1]; a delivery's QoS is the
//     lower of the publish's and the subscription's (3.1.1 4.3, MQTT 5
//     3.8.4), and a resend is the same delivery;
//   - PUBREC received (the server sent PUBREL): as that PUBREL, under the
//     same packet id, not as the PUBLISH again: "the receiver ... MUST NOT
//     cause duplicate messages to be delivered to any onward recipients"
//     once it sent PUBREC [MQTT-4.3.3-9] (3.1.1: 4.3.3), and the sender
//     "MUST NOT re-send the PUBLISH once it has sent the corresponding
//     PUBREL packet" [MQTT-4.3.3-4] (3.1.1: "MUST send a PUBREL ... MUST
//     NOT re-send the PUBLISH once it has sent the corresponding PUBREL").
func TestEdgesQoS2ResendOnResume(t *testing.T) { edgesQoS2ResendOnResume(t, inProcessPair) }

func edgesQoS2ResendOnResume(t *testing.T, pair func(*testing.T) instancePair) {
	for _, v := range []byte{4, 5} {
		for _, pubrec := range []bool{false, true} {
			t.Run(fmt.Sprintf("v%d/pubrec=%v", v, pubrec), func(t *testing.T) {
				ip := pair(t)
				aAddr := ip.startA()
				id, topic := "q2resend-"+randHex(4), "edges/q2/"+randHex(4)
				sub := dialPersistent(t, aAddr, id, v)
				subscribeRaw(t, sub, v, topic, 2)
				publishQoS2Raw(t, aAddr, topic, "m1", v)
				first := sub.nextOf(t, v, packets.Publish, 15*time.Second)
				if first.FixedHeader.Qos != 2 || string(first.Payload) != "m1" {
					t.Fatalf("first delivery: %q at QoS %d, want m1 at QoS 2", first.Payload, first.FixedHeader.Qos)
				}
				if pubrec {
					sub.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: first.PacketID})
					if rel := sub.nextOf(t, v, packets.Pubrel, 10*time.Second); rel.PacketID != first.PacketID {
						t.Fatalf("PUBREL under id %d, want %d", rel.PacketID, first.PacketID)
					}
				}
				sub.close()
				waitFor(t, 15*time.Second, "a records the session offline", func() bool { return ip.offline(id) })

				bAddr := ip.startB()
				again := dialPersistent(t, bAddr, id, v)
				pk, _ := again.next(t, v, 20*time.Second)
				if pubrec {
					if pk.FixedHeader.Type != packets.Pubrel || pk.PacketID != first.PacketID {
						t.Fatalf("resume after PUBREC: first packet type %d id %d (payload %q, QoS %d, DUP %v), want PUBREL (%d) id %d",
							pk.FixedHeader.Type, pk.PacketID, pk.Payload, pk.FixedHeader.Qos, pk.FixedHeader.Dup, packets.Pubrel, first.PacketID)
					}
					again.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: pk.PacketID})
					// Nothing of m1 after it: a marker published now is the
					// next message.
					publishQoS2Raw(t, bAddr, topic, "marker", v)
					next := again.nextOf(t, v, packets.Publish, 15*time.Second)
					if string(next.Payload) != "marker" {
						t.Fatalf("after the PUBREL's PUBCOMP the session got %q (QoS %d, DUP %v), want the marker", next.Payload, next.FixedHeader.Qos, next.FixedHeader.Dup)
					}
					return
				}
				if pk.FixedHeader.Type != packets.Publish || string(pk.Payload) != "m1" || pk.FixedHeader.Qos != 2 ||
					!pk.FixedHeader.Dup || pk.PacketID != first.PacketID {
					t.Fatalf("resume: type %d %q QoS %d DUP %v id %d, want PUBLISH m1 QoS 2 DUP 1 id %d",
						pk.FixedHeader.Type, pk.Payload, pk.FixedHeader.Qos, pk.FixedHeader.Dup, pk.PacketID, first.PacketID)
				}
			})
		}
	}
}

// TestEdgesHeldBackQoS2StaysInFlight (issue 53 item 10): a QoS 2 message
// held back by the client's Receive Maximum (1) is, once sent, in flight:
// the client's PUBREC gets PUBREL 0x00, not 0x92 Packet Identifier not
// found. MQTT 5 4.9 Flow Control: the server "MUST NOT send more than
// Receive Maximum QoS 1 and QoS 2 PUBLISH packets for which it has not
// received PUBACK, PUBCOMP, or PUBREC with a Reason Code of 128 or
// greater" [MQTT-3.3.4-9]; a PUBREC of a message in flight is answered by
// its PUBREL [MQTT-4.3.3-4].
func TestEdgesHeldBackQoS2StaysInFlight(t *testing.T) {
	edgesHeldBackQoS2StaysInFlight(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesHeldBackQoS2StaysInFlight(t *testing.T, addr string) {
	topic := "edges/held/" + randHex(4)
	sub := dialLight5(t, addr, "held-"+randHex(3), true, packets.Properties{ReceiveMaximum: 1})
	subscribeRaw(t, sub, 5, topic, 2)
	publishQoS2Raw(t, addr, topic, "first", 5)
	publishQoS2Raw(t, addr, topic, "second", 5)
	for _, want := range []string{"first", "second"} {
		pk := sub.nextOf(t, 5, packets.Publish, 15*time.Second)
		if string(pk.Payload) != want || pk.FixedHeader.Qos != 2 {
			t.Fatalf("got %q at QoS %d, want %s at QoS 2", pk.Payload, pk.FixedHeader.Qos, want)
		}
		// "second" waits for the end of the exchange of "first".
		sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
		rel := sub.nextOf(t, 5, packets.Pubrel, 10*time.Second)
		if rel.PacketID != pk.PacketID || rel.ReasonCode != 0 {
			t.Fatalf("PUBREC of %s (id %d): PUBREL id %d reason %#x, want reason 0x00", want, pk.PacketID, rel.PacketID, rel.ReasonCode)
		}
		sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: pk.PacketID})
	}
}
