package bridge

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestEdgesRetainedHashMatchesParent (issue 53 item 8): a retained message
// on foo/bar/baz is sent to a new subscription foo/+/baz/#: "#" matches
// the parent level too ("sport/tennis/player1/#" receives
// "sport/tennis/player1" [MQTT-4.7.1-2]), and a new subscription gets the
// retained messages of the topics its filter matches (MQTT 5 3.3.1.3,
// 3.1.1 3.3.1.3). Live delivery of the same message matched it; the
// retained scan did not.
func TestEdgesRetainedHashMatchesParent(t *testing.T) {
	edgesRetainedHashMatchesParent(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesRetainedHashMatchesParent(t *testing.T, addr string) {
	for _, v := range []byte{4, 5} {
		prefix := "edges/ret" + randHex(3)
		pub := dialClean(t, addr, v)
		pub.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
			PacketID: 1, TopicName: prefix + "/foo/bar/baz", Payload: []byte("kept")})
		if ack := pub.nextOf(t, v, packets.Puback, 10*time.Second); ack.ReasonCode != 0 {
			t.Fatalf("v%d retained publish: PUBACK %#x", v, ack.ReasonCode)
		}
		sub := dialClean(t, addr, v)
		sub.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 2,
			Filters: packets.Subscriptions{{Filter: prefix + "/foo/+/baz/#", Qos: 1}}})
		sub.nextOf(t, v, packets.Suback, 10*time.Second)
		got, _, err := sub.tryNext(v, 5*time.Second)
		if err != nil || got.FixedHeader.Type != packets.Publish || string(got.Payload) != "kept" || !got.FixedHeader.Retain {
			t.Fatalf("v%d subscription %s/foo/+/baz/#: got type %d %q retain %v (err %v), want the retained message of %s/foo/bar/baz",
				v, prefix, got.FixedHeader.Type, got.Payload, got.FixedHeader.Retain, err, prefix)
		}
	}
}
