package bridge

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestEdgesUnknownTopicAlias (issue 53 item 7): a PUBLISH with a
// zero-length Topic Name and a Topic Alias the client never mapped names
// no topic (MQTT 5 3.3.2.3.4: the mapping is set by a PUBLISH with the
// alias and a non-zero length Topic Name): the server answers DISCONNECT
// 0x82 Protocol Error and closes (4.13). It was silently ignored.
func TestEdgesUnknownTopicAlias(t *testing.T) {
	edgesUnknownTopicAlias(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesUnknownTopicAlias(t *testing.T, addr string) {
	c := dialLight5(t, addr, "alias-"+randHex(3), true, packets.Properties{})
	c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		Properties: packets.Properties{TopicAlias: 3, TopicAliasFlag: true}, Payload: []byte("x")})
	if code, acked := expectRefusal(t, c, 5*time.Second); code != 0x82 || acked {
		t.Fatalf("PUBLISH with an unmapped Topic Alias: DISCONNECT %#x (-1: none), acknowledged %v; want DISCONNECT 0x82", code, acked)
	}
}

// TestEdgesSysPublishAnswered (issue 53 item 9): a client's QoS 1 PUBLISH
// to $SYS/... is answered, not dropped with the connection left open: the
// server does not take $SYS topics from clients (4.7.2 "The Server SHOULD
// prevent Clients from using such Topic Names to exchange messages with
// other Clients"), and says so: MQTT 5 PUBACK 0x90 Topic Name invalid
// ("not accepted by this Client or Server", 3.4.2.1); MQTT 3.1.1, which
// has no negative PUBACK, closes the connection.
func TestEdgesSysPublishAnswered(t *testing.T) {
	edgesSysPublishAnswered(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesSysPublishAnswered(t *testing.T, addr string) {
	for _, v := range []byte{4, 5} {
		c := dialClean(t, addr, v)
		c.send(t, v, publishPacket("$SYS/broker/edges", 1, 9, "x"))
		if v == 5 {
			if ack := c.nextOf(t, v, packets.Puback, 5*time.Second); ack.PacketID != 9 || ack.ReasonCode != 0x90 {
				t.Fatalf("v5: PUBACK id %d reason %#x, want 9 0x90", ack.PacketID, ack.ReasonCode)
			}
			continue
		}
		if code, acked := expectRefusal(t, c, 5*time.Second); acked {
			t.Fatalf("v4: acknowledged (disconnect %d)", code)
		}
	}
}

// TestEdgesInvalidUTF8TopicTold (issue 53 item 13): an MQTT 5 PUBLISH or
// SUBSCRIBE whose topic is not valid UTF-8 is a Malformed Packet [MQTT-1.5.4-1]
// and ends the connection; the server tells the client why first: "the
// Server ... SHOULD send a DISCONNECT packet containing the reason code
// before closing" (4.13.1; 0x81 Malformed Packet). It closed without one.
func TestEdgesInvalidUTF8TopicTold(t *testing.T) {
	edgesInvalidUTF8TopicTold(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesInvalidUTF8TopicTold(t *testing.T, addr string) {
	for _, pk := range []packets.Packet{
		publishPacket("edges/\xff\xfe", 1, 1, "x"),
		{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 2, Filters: packets.Subscriptions{{Filter: "edges/\xff\xfe"}}},
	} {
		c := dialLight5(t, addr, "utf8-"+randHex(3), true, packets.Properties{})
		c.send(t, 5, pk)
		if code, acked := expectRefusal(t, c, 5*time.Second); code != 0x81 || acked {
			t.Fatalf("%s with an invalid UTF-8 topic: DISCONNECT %#x (-1: none), acknowledged %v; want DISCONNECT 0x81 before the close",
				packets.PacketNames[pk.FixedHeader.Type], code, acked)
		}
	}
}
