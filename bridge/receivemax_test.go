package bridge

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestV5ReceiveMaximumFreedWhenPubackSent: MQTT 5 frees a Receive Maximum
// slot when the PUBACK is sent [MQTT-3.3.4-9], so a client held to
// Receive Maximum 1 that sends its next QoS 1 publish the instant it reads
// each PUBACK is never disconnected with 0x93. The count must end before
// the PUBACK's bytes can reach the client: ended after the write, the next
// publish can be admitted against the stale count (26-79 PUBACKs of 2,000
// on a quiet machine).
func TestV5ReceiveMaximumFreedWhenPubackSent(t *testing.T) {
	cfg := testConfig("") // embedded Kafka
	cfg.MQTT.MaxInflight = 1
	b := startBridge(t, cfg)
	topic := uniqueTopic("recvmax1")
	c := dialLight5(t, b.MQTTAddr(), "recvmax1-"+randHex(3), true, packets.Properties{})
	const n = 2000
	for i := range n {
		id := uint16(i%65535 + 1)
		c.send(t, 5, publishPacket(topic, 1, id, "m"))
		pk, _ := c.next(t, 5, 30*time.Second)
		if pk.FixedHeader.Type != packets.Puback || pk.PacketID != id || pk.ReasonCode != 0 {
			t.Fatalf("publish %d of %d (Receive Maximum 1, each sent the instant the previous PUBACK was read): got type %d id %d reason %#x, want PUBACK %d",
				i+1, n, pk.FixedHeader.Type, pk.PacketID, pk.ReasonCode, id)
		}
	}
}

// TestQoS0NeverCountsAgainstReceiveMaximum: with mqtt.max_inflight QoS 2
// publishes awaiting PUBREL, a QoS 0 publish is still accepted and
// delivered, for MQTT 5 and 3.1.1 alike. (mochi refuses any PUBLISH, QoS 0
// included, once its own receive quota is used up, and an accepted QoS 2
// publish uses it up until its PUBREL.)
func TestQoS0NeverCountsAgainstReceiveMaximum(t *testing.T) {
	cfg := testConfig("") // embedded Kafka
	cfg.MQTT.MaxInflight = 2
	b := startBridge(t, cfg)
	for _, v := range []byte{4, 5} {
		t.Run("v"+strconv.Itoa(int(v)), func(t *testing.T) {
			topic := uniqueTopic("qos0free")
			sub := dialLight5(t, b.MQTTAddr(), "qos0free-sub-"+randHex(3), true, packets.Properties{})
			sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
				Filters: packets.Subscriptions{{Filter: topic, Qos: 0}}})
			if pk, _ := sub.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback {
				t.Fatalf("want SUBACK, got type %d", pk.FixedHeader.Type)
			}
			c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), "qos0free-"+randHex(3), v, 30)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			for id := uint16(1); id <= 2; id++ { // the limit, until PUBREL
				c.send(t, v, publishPacket(topic, 2, id, "q2"))
				if pk, _ := c.next(t, v, 30*time.Second); pk.FixedHeader.Type != packets.Pubrec || pk.PacketID != id || pk.ReasonCode != 0 {
					t.Fatalf("QoS 2 publish %d: got type %d id %d reason %#x, want PUBREC", id, pk.FixedHeader.Type, pk.PacketID, pk.ReasonCode)
				}
			}
			c.send(t, v, publishPacket(topic, 0, 0, "free"))
			c.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: 1})
			if pk, _ := c.next(t, v, 10*time.Second); pk.FixedHeader.Type != packets.Pubcomp || pk.PacketID != 1 {
				t.Fatalf("QoS 0 publish with 2 QoS 2 awaiting PUBREL (max_inflight 2), then PUBREL 1: got type %d id %d reason %#x, want PUBCOMP 1",
					pk.FixedHeader.Type, pk.PacketID, pk.ReasonCode)
			}
			for i := 0; ; i++ {
				pk, _ := sub.next(t, 5, 10*time.Second)
				if string(pk.Payload) == "free" {
					break
				}
				if i == 2 {
					t.Fatalf("the subscriber got %q, not the QoS 0 message", pk.Payload)
				}
			}
		})
	}
}
