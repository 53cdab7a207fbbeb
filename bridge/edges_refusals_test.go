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
	b := startBridge(t, testConfig(""))
	c := dialLight5(t, b.MQTTAddr(), "alias-"+randHex(3), true, packets.Properties{})
	c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		Properties: packets.Properties{TopicAlias: 3, TopicAliasFlag: true}, Payload: []byte("x")})
	if code, acked := expectRefusal(t, c, 5*time.Second); code != 0x82 || acked {
		t.Fatalf("PUBLISH with an unmapped Topic Alias: DISCONNECT %#x (-1: none), acknowledged %v; want DISCONNECT 0x82", code, acked)
	}
}
