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
	// mochi writes the PUBACK before it stores the retained message.
	deadline := time.Now().Add(time.Second)
	for _, topic := range []string{"foo/bar/baz", "foo/bar/baz/deeper", "foo/other/baz"} {
		for _, ok := s.Topics.Retained.Get(topic); !ok; _, ok = s.Topics.Retained.Get(topic) {
			if time.Now().After(deadline) {
				t.Fatalf("the retained message of %s not stored", topic)
			}
			time.Sleep(time.Millisecond)
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
		// The SUBACK, and the retained messages after it; a live delivery
		// of the last publish (its PUBACK comes before mochi delivers it)
		// may come too, without RETAIN.
		got := map[string]bool{}
		for until := time.Now().Add(time.Second); len(got) < len(c.want) && time.Now().Before(until); {
			pk, err := cl.tryNext(time.Until(until))
			if err != nil {
				break
			}
			if pk.FixedHeader.Type == packets.Suback && pk.ReasonCodes[0] != 0 {
				t.Fatalf("subscribe %s: %v", c.filter, pk.ReasonCodes)
			}
			if pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Retain {
				got[pk.TopicName] = true
			}
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%s: retained message of %s not sent (got %v)", c.filter, w, got)
			}
		}
	}
}
