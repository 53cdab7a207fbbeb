package bridge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestReplayedInFlightResentInOrder: [MQTT-4.6.0-1] "When the Server re-sends
// any PUBLISH packets, it MUST re-send them in the order in which the
// original PUBLISH packets were sent". A session resumes on instance b and
// b's replay puts 8 queued messages in flight; the client acknowledges
// none, drops its connection and reconnects to b: mochi resends b's
// in-flight messages itself. It sorts them by their creation second, random
// within a second, unless the inflight-order hook numbered them: the
// replay's own deliveries once went unnumbered and came back shuffled (the
// full-size soak's `0 1 17 19 21 28 2 29 ...`).
func TestReplayedInFlightResentInOrder(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		a, b := startBridge(t, ca), startBridge(t, cb)
		topic, id := "ord/"+randHex(4), "ord-"+randHex(3)
		cp := func() *paho.Connect {
			return &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
				Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(300))}}
		}
		noAck := paho.ClientConfig{ClientID: id, EnableManualAcknowledgment: true,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}}

		sub, _ := dialV5(t, a.MQTTAddr(), noAck, cp())
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		_ = sub.Disconnect(&paho.Disconnect{})

		// Published on b, which holds no copy of the session: only a
		// replay from Kafka brings them.
		pub := connectV5(t, b.MQTTAddr(), "ord-pub-"+randHex(3))
		const n = 8
		var want []string
		for i := range n {
			want = append(want, fmt.Sprint(i))
			mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(want[i])})
		}

		cc := noAck
		w1 := &wireConn{}
		cc.Conn = w1
		if _, ca := dialV5(t, b.MQTTAddr(), cc, cp()); !ca.SessionPresent {
			t.Fatal("resume on b: Session Present 0")
		}
		waitFor(t, 20*time.Second, "the replay's deliveries", func() bool { return len(w1.publishes(t)) >= n })
		if got := payloads(w1.publishes(t)); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("replayed %v, want %v", got, want)
		}
		dropConn(w1)
		waitFor(t, 10*time.Second, "b to see the drop", func() bool {
			return sessionOffline(b, id)
		})

		w2 := &wireConn{}
		cc.Conn = w2
		if _, ca := dialV5(t, b.MQTTAddr(), cc, cp()); !ca.SessionPresent {
			t.Fatal("reconnect to b: Session Present 0")
		}
		waitFor(t, 20*time.Second, "the resend", func() bool { return len(w2.publishes(t)) >= n })
		resent := w2.publishes(t)
		if got := payloads(resent); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("resent in the order %v, want %v", got, want)
		}
		for _, p := range resent {
			if !p.FixedHeader.Dup {
				t.Fatalf("resend of %q has DUP 0", p.Payload)
			}
		}
	})
}

func payloads(ps []wirePacket) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.Payload))
	}
	return out
}
