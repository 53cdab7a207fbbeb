package mochipatch

import (
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// deepTopic is a topic (and filter) of levels one-byte levels.
func deepTopic(levels int) string {
	return strings.TrimSuffix(strings.Repeat("l/", levels), "/")
}

// bounded sets the topic bounds of FERRY.md's change "edges 6".
func bounded(levels, length int) func(*mqtt.Capabilities) {
	return func(c *mqtt.Capabilities) { c.MaximumTopicLevels, c.MaximumTopicLength = levels, length }
}

// TestTopicBoundsRefuseWithReasonCodes (FERRY.md "edges 6"): with
// Capabilities.MaximumTopicLevels / MaximumTopicLength set, a SUBSCRIBE
// filter beyond them gets 0x8F Topic Filter invalid (MQTT 5 3.9.3: "The
// Topic Filter is correctly formed but is not allowed for this Client";
// 3.1.1: 0x80 Failure), an UNSUBSCRIBE of one 0x11 (it cannot exist) without
// walking the index, and a QoS 1 PUBLISH to a
// topic beyond them PUBACK 0x90 Topic Name invalid (3.1.1: the connection
// is closed, as for a publish the server refuses), before any work on the
// topic index. One within them is subscribed and delivered. Upstream has
// no bound: every SUBSCRIBE was granted.
func TestTopicBoundsRefuseWithReasonCodes(t *testing.T) {
	s := edgeServer(t, bounded(8, 64))
	for _, v := range []byte{4, 5} {
		c := connected(t, s, v, "bounds"+string('0'+v))
		long := "a/" + strings.Repeat("x", 70)
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: deepTopic(9)}, {Filter: long}, {Filter: deepTopic(8)}}})
		ack := c.next(time.Second)
		refused := byte(0x8F)
		if v == 4 {
			refused = 0x80
		}
		if want := []byte{refused, refused, 0}; string(ack.ReasonCodes) != string(want) {
			t.Fatalf("v%d SUBACK of 9 levels, 72 bytes, 8 levels: %#x, want %#x", v, ack.ReasonCodes, want)
		}
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 2,
			TopicName: deepTopic(8), Payload: []byte("in")})
		for got := 0; got < 2; {
			pk := c.next(time.Second)
			switch {
			case pk.FixedHeader.Type == packets.Puback && pk.ReasonCode == 0, pk.FixedHeader.Type == packets.Publish && string(pk.Payload) == "in":
				got++
			default:
				t.Fatalf("v%d publish within the bounds: got type %d reason %#x", v, pk.FixedHeader.Type, pk.ReasonCode)
			}
		}
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 3,
			TopicName: deepTopic(9), Payload: []byte("out")})
		if v == 5 {
			if pk := c.next(time.Second); pk.FixedHeader.Type != packets.Puback || pk.ReasonCode != 0x90 {
				t.Fatalf("v5 QoS 1 publish of 9 levels: type %d reason %#x, want PUBACK 0x90", pk.FixedHeader.Type, pk.ReasonCode)
			}
		} else if closed, got := c.closed(time.Second); !closed {
			t.Fatalf("v4 QoS 1 publish of 9 levels: connection open, got %v", got)
		}
	}
}

// BenchmarkWorstCaseSubscribe (FERRY.md "edges 6"): one SUBSCRIBE and
// its SUBACK over a connection, of a filter as deep and long as the bounds
// Ferry sets by default allow (mqtt.max_topic_levels 64,
// mqtt.max_topic_length 4096: 64 levels in 4,096 bytes), and of one beyond
// them (65,535 levels in 65,534 bytes, the most a filter can have),
// refused. Upstream has no bound and took 14.5 s of CPU for the latter
// (its topic index walks a filter from its start again for each level).
func BenchmarkWorstCaseSubscribe(b *testing.B) {
	s := edgeServer(b, bounded(64, 4096))
	c := connected(b, s, 5, "bench")
	deep := strings.Repeat(strings.Repeat("x", 63)+"/", 63) + strings.Repeat("x", 4096-64*63)
	huge := strings.Repeat("/", 65534)
	for _, bc := range []struct {
		name, filter string
		code         byte
	}{{"within-bounds", deep, 0}, {"beyond-bounds", huge, 0x8F}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
					Filters: packets.Subscriptions{{Filter: bc.filter}}})
				if ack := c.next(10 * time.Second); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != bc.code {
					b.Fatalf("SUBACK %#x, want %#x", ack.ReasonCodes, bc.code)
				}
			}
		})
	}
}

// TestSysPublishIsAnswered (FERRY.md "edges 9"): a client's QoS 1 PUBLISH
// to a $SYS topic, which the server does not accept from clients (4.7.2:
// "The Server SHOULD prevent Clients from using such Topic Names to
// exchange messages with other Clients"), is answered: MQTT 5 PUBACK 0x90
// Topic Name invalid ("The Topic Name is not malformed, but is not
// accepted by this Client or Server", 3.4.2.1), MQTT 3.1.1 (no negative
// PUBACK) by closing the connection. Upstream dropped it unanswered and
// kept the connection: the client waits for its PUBACK for ever.
func TestSysPublishIsAnswered(t *testing.T) {
	s := edgeServer(t)
	for _, v := range []byte{4, 5} {
		c := connected(t, s, v, "sys"+string(rune('0'+v)))
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 7,
			TopicName: "$SYS/broker/x", Payload: []byte("x")})
		if v == 5 {
			if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Puback || ack.PacketID != 7 || ack.ReasonCode != 0x90 {
				t.Fatalf("v5: type %d id %d reason %#x, want PUBACK 7 0x90", ack.FixedHeader.Type, ack.PacketID, ack.ReasonCode)
			}
			continue
		}
		if closed, got := c.closed(time.Second); !closed {
			t.Fatalf("v4: connection still open (got %v)", got)
		}
	}
}

// TestMalformedPacketToldBeforeClose (edges 13): an MQTT 5 client whose
// packet does not decode (here a PUBLISH topic that is not UTF-8,
// [MQTT-1.5.4-1]) gets DISCONNECT 0x81 Malformed Packet before the close
// (4.13.1: the server SHOULD send one); upstream closed without it.
func TestMalformedPacketToldBeforeClose(t *testing.T) {
	s := edgeServer(t)
	c := connected(t, s, 5, "utf8")
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "a/\xff", Payload: []byte("x")})
	closed, got := c.closed(time.Second)
	if !closed || len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x81 {
		t.Fatalf("closed %v after %d packets, want DISCONNECT 0x81 and the close", closed, len(got))
	}
}
