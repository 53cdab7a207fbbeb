package bridge

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestInflightCapDropComesOnResume (issue 54, item 4): mochi refuses a QoS 1
// delivery to a client that already has MaximumInflight messages in flight.
// For a connected persistent session that drop must not be taken for
// delivered: when the client acknowledges what it had and later messages,
// the session's position must stay at the dropped ones, and its next
// resume delivers them. Before, the refusal had no hook: the later
// acknowledgements moved the position past the dropped messages and they
// were lost for good, uncounted.
func TestInflightCapDropComesOnResume(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const capInflight = 4
	cfg := testConfig(brokers)
	cfg.maxInflightOut = capInflight
	b := startBridge(t, cfg)
	topic := uniqueTopic("capdrop")
	id := "capdrop-" + randHex(4)

	var mu sync.Mutex
	var got []string
	var held []paho.Message
	sub := connectPaho(t, b.MQTTAddr(), id, func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetAutoAckDisabled(true)
	})
	if tok := sub.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(m.Payload()))
		held = append(held, m)
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connectPaho(t, b.MQTTAddr(), "capdrop-pub-"+randHex(4))

	// 10 messages while the subscriber acknowledges nothing: 4 are put in
	// flight, 6 refused by the cap.
	drops0 := metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil)
	for i := range 10 {
		publishQoS1(t, pub, topic, fmt.Sprintf("m%d", i), false)
	}
	waitFor(t, 10*time.Second, "the first 4 deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= capInflight })
	if d := metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil) - drops0; d != 10-capInflight {
		t.Errorf("ferry_mqtt_subscriber_drops_total grew by %v, want %d: every refused delivery counted", d, 10-capInflight)
	}
	// The client acknowledges them, then two more arrive and are
	// acknowledged: the position must not move past m4..m9.
	ackAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range held {
			m.Ack()
		}
		held = nil
	}
	ackAll()
	for i := 10; i < 12; i++ {
		publishQoS1(t, pub, topic, fmt.Sprintf("m%d", i), false)
	}
	waitFor(t, 10*time.Second, "m10 and m11", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "m11")
	})
	ackAll()
	waitAcked(t, b, id)
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "the session offline", func() bool { return sessionOffline(b, id) })

	mu.Lock()
	got = nil
	mu.Unlock()
	connectPaho(t, b.MQTTAddr(), id, func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(m.Payload()))
		})
	})
	want := []string{"m4", "m5", "m6", "m7", "m8", "m9"}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		have := slices.Clone(got)
		mu.Unlock()
		missing := 0
		for _, w := range want {
			if !slices.Contains(have, w) {
				missing++
			}
		}
		if missing == 0 {
			var order []string
			for _, m := range have {
				if slices.Contains(want, m) && !slices.Contains(order, m) {
					order = append(order, m)
				}
			}
			if !slices.Equal(order, want) {
				t.Fatalf("after the resume: the refused messages came as %q, want them in order %q", order, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the resume: got %q, want every message the in-flight cap refused (%q)", have, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
