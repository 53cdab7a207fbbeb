package bridge

import (
	"context"
	"slices"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/topicmap"
)

// TestReplayFindsTopicMissingFromSharedListing: a resumed session's first
// pass uses the shared listing of topics, which may predate a topic
// created since (here: filled, without it, after its messages were
// published). The last pass lists anew and replays that topic from the
// subscription's time: the queued messages still arrive.
func TestReplayFindsTopicMissingFromSharedListing(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		a, b := startBridge(t, ca), startBridge(t, cb)
		id, prefix := "dev-"+randHex(4), "fresh/"+randHex(4)
		topic := prefix + "/x"
		ktopic, err := topicmap.EncodeTopic(topic)
		if err != nil {
			t.Fatal(err)
		}
		sub := connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
		if tok := sub.Subscribe(prefix+"/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
		sub.Disconnect(100)
		pub := connectPaho(t, a.MQTTAddr(), "pub-"+randHex(4))
		publishN(t, pub, topic, 0, 3)

		// b's shared listing: taken now, but without the new topic.
		names, err := b.stateEngine.TopicListing(context.Background(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(names, ktopic) {
			t.Fatalf("the listing lacks %s: the test cannot take it out", ktopic)
		}
		b.stateEngine.ShareTopicListing(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == ktopic }), time.Now())

		col := &collector{}
		sub2 := connectPaho(t, b.MQTTAddr(), id, func(o *pahov3.ClientOptions) {
			o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(col.handler)
		})
		defer sub2.Disconnect(100)
		waitFor(t, 15*time.Second, "the 3 messages of a topic missing from the shared listing", func() bool { return col.len() >= 3 })
	})
}
