package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestConformanceRetained: MQTT 5 3.3.1.3 RETAIN.
//   - "If the RETAIN flag is set to 1 in a PUBLISH packet sent by a Client to
//     a Server, the Server MUST replace any existing retained message for
//     this topic and store the Application Message" [MQTT-3.3.1-5].
//   - "If the Payload contains zero bytes it is processed normally by the
//     Server but any retained message with the same topic name MUST be
//     removed and any future subscribers for the topic will not receive a
//     retained message" [MQTT-3.3.1-6], [MQTT-3.3.1-7].
//   - Retain Handling 0: "the Server MUST send the retained messages matching
//     the Topic Filter of the subscription to the Client" [MQTT-3.3.1-9],
//     with the RETAIN flag set (3.3.1.3: "a retained message ... sent when a
//     subscription is established").
//
// QoS 1 publishes: their acknowledgement waits for Kafka.
func TestConformanceRetained(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/retain/" + randHex(4)
		pub := connectV5(t, b.MQTTAddr(), "ret-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("v1")})
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("v2")})

		in := newInbox()
		sub := v5Sub(t, b.MQTTAddr(), "ret-sub-"+randHex(3), in)
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		got := in.wait(t, 1, 10*time.Second)
		if string(got[0].Payload) != "v2" || !got[0].Retain {
			t.Fatalf("on subscribe: got %q retain=%v, want the replacing retained message \"v2\" with RETAIN 1", got[0].Payload, got[0].Retain)
		}

		// Clear: an empty retained payload is delivered normally to the
		// existing subscriber, and no later subscriber gets a retained message.
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: nil})
		got = in.wait(t, 2, 10*time.Second)
		if len(got[1].Payload) != 0 {
			t.Fatalf("empty retained publish delivered as %q", got[1].Payload)
		}
		in2 := newInbox()
		sub2 := v5Sub(t, b.MQTTAddr(), "ret-sub2-"+randHex(3), in2)
		mustSubscribe(t, sub2, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("live")})
		got = in2.wait(t, 1, 10*time.Second)
		if string(got[0].Payload) != "live" || got[0].Retain {
			t.Fatalf("after clearing, a new subscriber first got %q retain=%v, want the live message only", got[0].Payload, got[0].Retain)
		}
	})
}

// TestConformanceRetainAsPublished: MQTT 5 3.8.3.1 Retain As Published. "If
// the value of Retain As Published subscription option is set to 0, the
// Server MUST set the RETAIN flag to 0 when forwarding an Application
// Message regardless of how the RETAIN flag was set in the received PUBLISH
// packet" [MQTT-3.3.1-12]; "If the value ... is set to 1, the Server MUST set
// the RETAIN flag equal to the RETAIN flag in the received PUBLISH packet"
// [MQTT-3.3.1-13].
func TestConformanceRetainAsPublished(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/rap/" + randHex(4)
		rap, plain := newInbox(), newInbox()
		s1 := v5Sub(t, b.MQTTAddr(), "rap1-"+randHex(3), rap)
		s2 := v5Sub(t, b.MQTTAddr(), "rap0-"+randHex(3), plain)
		mustSubscribe(t, s1, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1, RetainAsPublished: true}}})
		mustSubscribe(t, s2, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		pub := connectV5(t, b.MQTTAddr(), "rap-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("r")})
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("n")})
		for _, tt := range []struct {
			name string
			in   *inbox
			want [2]bool
		}{{"retain as published", rap, [2]bool{true, false}}, {"retain as published 0", plain, [2]bool{false, false}}} {
			got := tt.in.wait(t, 2, 10*time.Second)
			if got[0].Retain != tt.want[0] || got[1].Retain != tt.want[1] {
				t.Errorf("%s: RETAIN flags %v, %v; want %v", tt.name, got[0].Retain, got[1].Retain, tt.want)
			}
		}
	})
}

// TestConformanceRetainHandling: MQTT 5 3.8.3.1 Retain Handling. "If
// Retain Handling is set to 0 the Server MUST send the retained messages
// matching the Topic Filter of the subscription to the Client"
// [MQTT-3.3.1-9]; "If Retain Handling is set to 1 then if the subscription
// did not already exist, the Server MUST send all retained message matching
// the Topic Filter of the subscription to the Client, and if the
// subscription did exist the Server MUST NOT send the retained messages"
// [MQTT-3.3.1-10]; "If Retain Handling is set to 2, the Server MUST NOT send
// the retained messages" [MQTT-3.3.1-11].
func TestConformanceRetainHandling(t *testing.T) {
	b := startBridge(t, testConfig(""))
	// mochi writes the SUBACK, then queues the retained messages on the
	// subscriber's read goroutine: a client that publishes on the SUBACK can
	// overtake them (a cold run under load: a retained message missing
	// before its marker). Every SUBACK here waits a while after its write,
	// so that the test meets that interleaving each time.
	if err := b.server.AddHook(&subackDelay{}, nil); err != nil {
		t.Fatal(err)
	}
	topic := "conf/rh/" + randHex(4)
	pub := connectV5(t, b.MQTTAddr(), "rh-pub-"+randHex(3))
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("kept")})

	// retained counts the retained messages a SUBSCRIBE brings: a live
	// marker published after the SUBACK arrives after them.
	retained := func(in *inbox, c *paho.Client, id string, rh byte, before int) int {
		t.Helper()
		// mochi keeps one packet-id space per client for both directions: a
		// SUBSCRIBE under an id its last delivery still holds (PUBACK not
		// read yet) gets SUBACK 0x91. The client subscribes again only once
		// the broker has its acknowledgements.
		waitAcked(t, b, id)
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1, RetainHandling: rh}}})
		// The fence: mochi reads the client's next packet only once the
		// SUBSCRIBE's retained messages are in its outbound queue, so a
		// marker published after that packet's ack queues behind them. (Any
		// UNSUBACK will do: the filter was never subscribed, and its packet
		// id may be one a delivery holds.)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic + "/fence"}})
		cancel()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("unsubscribe (fence): %v", err)
		}
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("marker")})
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := in.all()[before:]
			for i, m := range got {
				if string(m.Payload) == "marker" {
					return i
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("marker not received")
			}
			in.wait(t, before+len(got)+1, time.Until(deadline))
		}
	}
	for _, tt := range []struct {
		rh          byte
		first, more int // retained messages on the first and on a repeated SUBSCRIBE
	}{{0, 1, 1}, {1, 1, 0}, {2, 0, 0}} {
		in := newInbox()
		id := "rh-" + randHex(3)
		c := v5Sub(t, b.MQTTAddr(), id, in)
		if got := retained(in, c, id, tt.rh, 0); got != tt.first {
			t.Errorf("retain handling %d, new subscription: %d retained messages, want %d", tt.rh, got, tt.first)
		}
		n := len(in.all())
		if got := retained(in, c, id, tt.rh, n); got != tt.more {
			t.Errorf("retain handling %d, existing subscription: %d retained messages, want %d", tt.rh, got, tt.more)
		}
	}
}

// TestConformanceRetainedV311: MQTT 3.1.1 3.3.1.3. "When sending a PUBLISH
// Packet to a Client the Server MUST set the RETAIN flag to 1 if a message
// is sent as a result of a new subscription being made by a Client
// [MQTT-3.3.1-8]. It MUST set the RETAIN flag to 0 when a PUBLISH Packet is
// sent to a Client because it matches an established subscription
// regardless of how the flag was set in the message it received
// [MQTT-3.3.1-9]." An empty retained payload clears [MQTT-3.3.1-10].
func TestConformanceRetainedV311(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/ret3/" + randHex(4)
		pub := connectPaho(t, b.MQTTAddr(), "ret3-pub-"+randHex(3))
		if tok := pub.Publish(topic, 1, true, "kept"); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		type msg struct {
			payload  string
			retained bool
		}
		got := make(chan msg, 10)
		sub := connectPaho(t, b.MQTTAddr(), "ret3-sub-"+randHex(3))
		if tok := sub.Subscribe(topic, 1, func(_ pahov3.Client, m pahov3.Message) {
			got <- msg{string(m.Payload()), m.Retained()}
		}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
		for _, want := range []msg{{"kept", true}, {"again", false}} {
			if want.payload == "again" {
				if tok := pub.Publish(topic, 1, true, "again"); !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
					t.Fatalf("publish: %v", tok.Error())
				}
			}
			select {
			case m := <-got:
				if m != want {
					t.Fatalf("got %+v, want %+v", m, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no message %q", want.payload)
			}
		}
	})
}

// subackDelay holds the goroutine that wrote a SUBACK for a while
// (TestConformanceRetainHandling).
type subackDelay struct{ mqtt.HookBase }

func (*subackDelay) ID() string { return "suback-delay" }

func (*subackDelay) Provides(b byte) bool { return b == mqtt.OnPacketSent }

func (*subackDelay) OnPacketSent(_ *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Suback {
		time.Sleep(200 * time.Millisecond)
	}
}
