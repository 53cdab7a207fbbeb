// Conformance of QoS 1/2 local delivery and acknowledgements (issue 15
// items 1-3): local delivery of a bridged QoS 1 publish keeps its origin
// (No Local) and Message Expiry; acknowledgements carry only their own
// properties.

package bridge

import (
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestConformanceNoLocalQoS1: MQTT 5 3.8.3.1 No Local. "If the value
// is 1, Application Messages MUST NOT be forwarded to a connection with a
// ClientID equal to the ClientID of the publishing connection"
// [MQTT-3.8.3-3].
func TestConformanceNoLocalQoS1(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/nolocal/" + randHex(4)
		own := newInbox()
		c := v5Sub(t, b.MQTTAddr(), "nolocal-"+randHex(3), own)
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1, NoLocal: true}, {Topic: topic + "/marker", QoS: 1}}})
		mustPublish(t, c, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("mine")})
		mustPublish(t, c, &paho.Publish{Topic: topic + "/marker", QoS: 1, Payload: []byte("marker")})
		got := own.wait(t, 1, 10*time.Second)
		if string(got[0].Payload) != "marker" {
			t.Fatalf("No Local subscriber received its own %q", got[0].Payload)
		}
	})
}

// TestConformanceMessageExpiryQoS1: MQTT 5 3.3.2.3.3 Message Expiry
// Interval. "If the Message Expiry Interval has passed and the Server has
// not managed to start onward delivery to a matching subscriber, then it
// MUST delete the copy of the message for that subscriber" [MQTT-3.3.2-5];
// the forwarded interval is the received one minus the time waited
// [MQTT-3.3.2-6].
func TestConformanceMessageExpiryQoS1(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/expiry/" + randHex(4)
		id := "expiry-" + randHex(3)
		cp := func() *paho.Connect {
			return &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
				Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(60))}}
		}
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id}, cp())
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		if err := c.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		pub := connectV5(t, b.MQTTAddr(), "expiry-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("short"), Properties: &paho.PublishProperties{MessageExpiry: ptr(uint32(1))}})
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("long"), Properties: &paho.PublishProperties{MessageExpiry: ptr(uint32(60))}})
		expired := time.Now().Add(2100 * time.Millisecond)
		waitFor(t, 5*time.Second, "the short message to expire", func() bool { return time.Now().After(expired) })
		in := newInbox()
		w := &wireConn{}
		dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w, OnPublishReceived: in.handler()}, cp())
		got := in.wait(t, 1, 10*time.Second)
		if string(got[0].Payload) != "long" {
			t.Fatalf("after expiry, first delivery %q, want only \"long\"", got[0].Payload)
		}
		if p := w.publishes(t)[0]; p.Properties.MessageExpiryInterval == 0 || p.Properties.MessageExpiryInterval > 59 {
			t.Errorf("forwarded Message Expiry Interval %d, want the remaining 58..59", p.Properties.MessageExpiryInterval)
		}
	})
}

// TestConformanceAckProperties: MQTT 5 3.4.2.2 / 3.5.2.2: a PUBACK
// or PUBREC carries only its own Reason String and User Properties, never
// the PUBLISH's (mochi's Compatibilities.NoInheritedPropertiesOnAck). A
// success acknowledgement without properties is at most 5 bytes (fixed
// header, packet id, reason code) plus a zero property length.
func TestConformanceAckProperties(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		w := &wireConn{}
		id := "ackprops-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true})
		props := &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}
		for _, qos := range []byte{1, 2} {
			mustPublish(t, c, &paho.Publish{Topic: "conf/ackprops/" + randHex(3), QoS: qos, Payload: []byte("x"), Properties: props})
		}
		for _, p := range w.packets(t) {
			if (p.FixedHeader.Type == packets.Puback || p.FixedHeader.Type == packets.Pubrec || p.FixedHeader.Type == packets.Pubcomp) && p.size > 6 {
				t.Errorf("acknowledgement type %d is %d bytes: it carries properties it did not set", p.FixedHeader.Type, p.size)
			}
		}
	})
}
