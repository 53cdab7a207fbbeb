package mochipatch

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestUnknownTopicAliasIsAProtocolError (FERRY.md "edges 7"): a PUBLISH
// with a zero-length Topic Name and a Topic Alias the client never mapped
// (MQTT 5 3.3.2.3.4: "A sender can modify the Topic Alias mapping by
// sending another PUBLISH ... with the same Topic Alias value and a
// different non-zero length Topic Name"; a zero-length name uses the
// mapping there is) names no topic: the server closes the connection with
// DISCONNECT 0x82 Protocol Error (4.13). Upstream stored the empty name as
// the alias's mapping and went on with a publish to no topic: no answer,
// and a later use of the alias published to "" too.
func TestUnknownTopicAliasIsAProtocolError(t *testing.T) {
	s := edgeServer(t)
	c := connected(t, s, 5, "alias")
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		Properties: packets.Properties{TopicAlias: 3, TopicAliasFlag: true}, Payload: []byte("x")})
	closed, got := c.closed(2 * time.Second)
	if !closed || len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x82 {
		t.Fatalf("PUBLISH with an unmapped Topic Alias: closed %v after %v, want DISCONNECT 0x82 and the close", closed, got)
	}
	// A mapped alias still works.
	c = connected(t, s, 5, "alias2")
	for i, topic := range []string{"a/b", ""} {
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: uint16(i + 1), TopicName: topic,
			Properties: packets.Properties{TopicAlias: 3, TopicAliasFlag: true}, Payload: []byte("x")})
		if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Puback || ack.ReasonCode >= 0x80 {
			t.Fatalf("publish %d with the mapped alias: type %d reason %#x", i, ack.FixedHeader.Type, ack.ReasonCode)
		}
	}
}
