package bridge

import (
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestResumeWithoutSessionExpiry: MQTT 5 3.1.2.4 Clean Start. "If a
// CONNECT packet is received with Clean Start set to 0 and there is a
// Session associated with the Client Identifier, the Server MUST resume
// communications with the Client based on state from the existing Session"
// [MQTT-3.1.2-6]; the new CONNECT's Session Expiry Interval (absent: 0)
// only says how long the session lasts after this connection: with 0 it
// ends when the connection closes (3.1.2.11.2). A session made with expiry
// 99999 subscribes at QoS 2 and goes; QoS 0, 1 and 2 messages are
// published (two QoS 1 with a Message Expiry Interval: one expires before
// the resume, one does not). The client comes back with Clean Start 0 and
// no Session Expiry Interval, on the same instance and on another one:
// Session Present 1, the QoS 1 and 2 messages and the unexpired one (with
// what is left of its interval), in order, nothing else; after it
// disconnects the session is gone (its record deleted, a new resume gets
// Session Present 0).
func TestResumeWithoutSessionExpiry(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		a, b := startBridge(t, ca), startBridge(t, cb)
		t.Run("same instance", func(t *testing.T) { resumeWithoutExpiry(t, ca, a, a) })
		t.Run("other instance", func(t *testing.T) { resumeWithoutExpiry(t, ca, a, b) })
	})
}

// resumeWithoutExpiry is TestResumeWithoutSessionExpiry's session: made on
// a (config ca), resumed on inst.
func resumeWithoutExpiry(t *testing.T, ca Config, a, inst *Bridge) {
	id, base := "noexp-"+randHex(4), "noexp"+randHex(4)
	sub := connectV5(t, a.MQTTAddr(), id, func(_ *paho.ClientConfig, cp *paho.Connect) {
		cp.CleanStart = false
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](99999)}
	})
	mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: base + "/#", QoS: 2}}})
	if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the session's disconnect record", func() bool {
		rec := sessionIn(t, readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic), id)
		return rec != nil && !rec.Connected
	})
	// One topic: one Kafka partition, so the resume delivers in publish
	// order and the live marker comes after the queue.
	topic := base + "/m"
	pub := connectV5(t, a.MQTTAddr(), "noexp-pub-"+randHex(4))
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("short"),
		Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](1)}})
	expired := time.Now().Add(2100 * time.Millisecond)
	for _, m := range []struct {
		payload string
		qos     byte
		expiry  uint32
	}{{"q0", 0, 0}, {"q1", 1, 0}, {"q2", 2, 0}, {"long", 1, 3600}} {
		p := &paho.Publish{Topic: topic, QoS: m.qos, Payload: []byte(m.payload)}
		if m.expiry > 0 {
			p.Properties = &paho.PublishProperties{MessageExpiry: ptr(m.expiry)}
		}
		mustPublish(t, pub, p)
	}
	waitFor(t, 5*time.Second, "the short message to expire", func() bool { return time.Now().After(expired) })

	in := newInbox()
	w := &wireConn{}
	c, ack := dialV5(t, inst.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w, OnPublishReceived: in.handler()},
		&paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false})
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("Clean Start 0 without a Session Expiry Interval: CONNACK reason %#x, Session Present %v, want 0 and 1",
			ack.ReasonCode, ack.SessionPresent)
	}
	// The queue, then a live marker: nothing else may come first.
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("marker")})
	got := untilMarker(t, in, "marker", 20*time.Second)
	if !slices.Equal(got, []string{"q1", "q2", "long"}) {
		t.Fatalf("resumed with Clean Start 0 and no Session Expiry Interval: got %v before the live marker, want [q1 q2 long] (QoS 0 is not queued, short expired)", got)
	}
	for _, p := range w.publishes(t) {
		if string(p.Payload) == "long" && (p.Properties.MessageExpiryInterval == 0 || p.Properties.MessageExpiryInterval >= 3600) {
			t.Errorf("forwarded Message Expiry Interval %d, want what is left of 3600", p.Properties.MessageExpiryInterval)
		}
	}

	// Expiry 0: the session ends with this connection.
	if err := c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the session's record deleted at disconnect", func() bool {
		v, ok := readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic)[id]
		return ok && v == nil
	})
	if _, ack := dialV5(t, inst.MQTTAddr(), paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](99999)}}); ack.SessionPresent {
		t.Fatal("the session resumed with expiry 0 outlived its connection: Session Present 1, want 0")
	}
}

// untilMarker waits until marker arrives in the inbox and returns the
// payloads received before it, in order.
func untilMarker(t testing.TB, in *inbox, marker string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		var got []string
		for _, p := range in.all() {
			if string(p.Payload) == marker {
				return got
			}
			got = append(got, string(p.Payload))
		}
		select {
		case <-in.ch:
		case <-deadline.C:
			t.Fatalf("got %v within %s, no %s", got, timeout, marker)
		}
	}
}
