package mochipatch

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRetainedMatchesHashParentLevel (FERRY.md "edges 8"): a new
// subscription gets the retained messages of every topic its filter
// matches, and "#" also matches the parent level: "if a Client subscribes
// to "sport/tennis/player1/#", it would receive messages published using
// these topic names: "sport/tennis/player1", ..." [MQTT-4.7.1-2] (3.1.1
// 4.7.1.2, MQTT 5 4.7.1.2), and "the Server MUST send ... the retained
// messages matching the Topic Filter of the subscription" (3.3.1.3).
// Upstream's live delivery matches the parent, its retained scan did not:
// a retained message on foo/bar/baz never reached foo/+/baz/# nor
// foo/bar/baz/#.
func TestRetainedMatchesHashParentLevel(t *testing.T) {
	s := edgeServer(t)
	pub := connected(t, s, 5, "pub")
	for i, topic := range []string{"foo/bar/baz", "foo/bar/baz/deeper", "foo/other/baz"} {
		pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
			PacketID: uint16(i + 1), TopicName: topic, Payload: []byte(topic)})
		if ack := pub.next(time.Second); ack.FixedHeader.Type != packets.Puback {
			t.Fatalf("retained publish to %s: type %d", topic, ack.FixedHeader.Type)
		}
	}
	for i, c := range []struct {
		filter string
		want   []string
	}{
		{"foo/+/baz/#", []string{"foo/bar/baz", "foo/bar/baz/deeper", "foo/other/baz"}},
		{"foo/bar/baz/#", []string{"foo/bar/baz", "foo/bar/baz/deeper"}},
		{"foo/bar/#", []string{"foo/bar/baz", "foo/bar/baz/deeper"}},
	} {
		cl := connected(t, s, 5, "ret"+string(rune('a'+i)))
		cl.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: c.filter}}})
		if ack := cl.next(time.Second); ack.FixedHeader.Type != packets.Suback || ack.ReasonCodes[0] != 0 {
			t.Fatalf("subscribe %s: type %d %v", c.filter, ack.FixedHeader.Type, ack.ReasonCodes)
		}
		got := map[string]bool{}
		for range c.want {
			pk, err := cl.tryNext(time.Second)
			if err != nil {
				break
			}
			got[pk.TopicName] = pk.FixedHeader.Retain
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%s: retained message of %s not sent (got %v)", c.filter, w, got)
			}
		}
	}
}
