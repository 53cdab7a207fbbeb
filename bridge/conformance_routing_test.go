package bridge

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestConformanceOverlappingSubscriptions: MQTT 5 3.3.4 PUBLISH Actions.
// With overlapping subscriptions, "the Server MUST deliver the message to
// the Client respecting the maximum QoS of all the matching subscriptions"
// [MQTT-3.3.4-2]; "If the Client specified a Subscription Identifier for any
// of the overlapping subscriptions the Server MUST send those Subscription
// Identifiers in the message which is published as the result of the
// subscriptions" [MQTT-3.3.4-3]; "If the Server sends a single copy of the
// message it MUST include in the PUBLISH packet the Subscription
// Identifiers for all matching subscriptions which have a Subscription
// Identifiers, their order is not significant" [MQTT-3.3.4-4].
func TestConformanceOverlappingSubscriptions(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		base := "conf/overlap/" + randHex(4)
		w := &wireConn{}
		id := "ovl-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}},
			&paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true})
		for i, s := range []paho.SubscribeOptions{{Topic: base + "/#", QoS: 0}, {Topic: base + "/+", QoS: 1}, {Topic: base + "/a", QoS: 0}} {
			sid := i + 1
			mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{s}, Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &sid}})
		}
		pub := connectV5(t, b.MQTTAddr(), "ovl-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: base + "/a", QoS: 1, Payload: []byte("one")})
		mustPublish(t, pub, &paho.Publish{Topic: base + "/marker", QoS: 1, Payload: []byte("marker")})
		waitFor(t, 10*time.Second, "the marker", func() bool {
			ps := w.publishes(t)
			return len(ps) > 0 && string(ps[len(ps)-1].Payload) == "marker"
		})
		var copies []wirePacket
		for _, p := range w.publishes(t) {
			if string(p.Payload) == "one" {
				copies = append(copies, p)
			}
		}
		if len(copies) != 1 {
			t.Fatalf("%d copies delivered, want one", len(copies))
		}
		ids := slices.Clone(copies[0].Properties.SubscriptionIdentifier)
		slices.Sort(ids)
		if copies[0].FixedHeader.Qos != 1 || !slices.Equal(ids, []int{1, 2, 3}) {
			t.Fatalf("delivered at QoS %d with subscription identifiers %v, want QoS 1 and [1 2 3]", copies[0].FixedHeader.Qos, ids)
		}
	})
}

// TestConformanceDollarTopics: MQTT 5 4.7.2 Topics beginning with $. "The
// Server MUST NOT match Topic Filters starting with a wildcard character (#
// or +) with Topic Names beginning with a $ character" [MQTT-4.7.2-1]. The
// broker's own $SYS topics are the test case: "#" and "+/broker/..." never
// receive them, "$SYS/#" does.
func TestConformanceDollarTopics(t *testing.T) {
	b := startBridge(t, testConfig(""))
	all, sys := newInbox(), newInbox()
	c1 := v5Sub(t, b.MQTTAddr(), "dollar-all-"+randHex(3), all)
	c2 := v5Sub(t, b.MQTTAddr(), "dollar-sys-"+randHex(3), sys)
	mustSubscribe(t, c1, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "#"}, {Topic: "+/broker/uptime"}}})
	mustSubscribe(t, c2, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$SYS/#"}}})
	// mochi publishes $SYS every second (retained: also sent at subscribe).
	sys.wait(t, 1, 10*time.Second)
	pub := connectV5(t, b.MQTTAddr(), "dollar-pub-"+randHex(3))
	// QoS 0: delivered at once, whatever Kafka does.
	mustPublish(t, pub, &paho.Publish{Topic: "conf/dollar/marker", QoS: 0, Payload: []byte("marker")})
	// Retained $SYS messages would have reached "#" at its SUBSCRIBE, before
	// the marker; a live update reaches $SYS/# meanwhile.
	waitFor(t, 10*time.Second, "the marker and a live $SYS update", func() bool {
		return len(all.all()) > 0 && len(sys.all()) > 1
	})
	for _, m := range all.all() {
		if strings.HasPrefix(m.Topic, "$") {
			t.Fatalf("\"#\" or \"+/...\" received %q", m.Topic)
		}
	}
	for _, m := range sys.all() {
		if !strings.HasPrefix(m.Topic, "$SYS/") {
			t.Fatalf("$SYS/# received %q", m.Topic)
		}
	}
}

// TestConformanceTopicAliasInbound: MQTT 5 3.3.2.3.4 Topic Alias. A client
// may send a Topic Alias with the topic name, then the alias with a
// zero-length topic name; the receiver "MUST use the Topic Alias to
// replace the zero-length Topic Name" (3.3.2.3.4) [MQTT-3.3.2-12]:
// subscribers get the full topic name, and so does Kafka.
func TestConformanceTopicAliasInbound(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/alias/in/" + randHex(4)
		in := newInbox()
		sub := v5Sub(t, b.MQTTAddr(), "alias-in-sub-"+randHex(3), in)
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		pub := connectV5(t, b.MQTTAddr(), "alias-in-pub-"+randHex(3))
		alias := uint16(1)
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("named"), Properties: &paho.PublishProperties{TopicAlias: &alias}})
		mustPublish(t, pub, &paho.Publish{Topic: "", QoS: 1, Payload: []byte("aliased"), Properties: &paho.PublishProperties{TopicAlias: &alias}})
		got := in.wait(t, 2, 10*time.Second)
		for _, m := range got {
			if m.Topic != topic {
				t.Errorf("%q delivered on topic %q, want %q", m.Payload, m.Topic, topic)
			}
		}
		recs := readTopic(t, b.KafkaBrokers(), kafkaName(t, topic), 2, 20*time.Second)
		if string(recs[1].Value) != "aliased" {
			t.Errorf("Kafka record 2: %q, want \"aliased\"", recs[1].Value)
		}
	})
}

// TestConformanceTopicAliasOutbound: MQTT 5 3.3.2.3.4 and 3.1.2.11.5. "The
// Server MUST NOT send a Topic Alias in a PUBLISH packet to the Client
// greater than" the client's Topic Alias Maximum [MQTT-3.1.2-26]; with no
// Topic Alias Maximum (0) the Server "MUST NOT send any Topic Aliases"
// [MQTT-3.1.2-27]. A server using an alias sends it with the topic name
// first and may then send it with a zero-length topic name.
func TestConformanceTopicAliasOutbound(t *testing.T) {
	b := startBridge(t, testConfig(""))
	topic := "conf/alias/out/" + randHex(4)
	subscribe := func(max uint16) *wireConn {
		w := &wireConn{}
		id := "alias-out-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}},
			&paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Properties: &paho.ConnectProperties{TopicAliasMaximum: ptr(max)}})
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		return w
	}
	withAliases, without := subscribe(2), subscribe(0)
	pub := connectV5(t, b.MQTTAddr(), "alias-out-pub-"+randHex(3))
	for _, p := range []string{"1", "2", "3"} {
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(p)})
	}
	for _, w := range []*wireConn{withAliases, without} {
		waitFor(t, 10*time.Second, "three deliveries", func() bool { return len(w.publishes(t)) == 3 })
	}
	for i, p := range without.publishes(t) {
		if p.Properties.TopicAliasFlag || p.TopicName != topic {
			t.Errorf("client without Topic Alias Maximum, delivery %d: alias %d topic %q", i, p.Properties.TopicAlias, p.TopicName)
		}
	}
	var alias uint16
	for i, p := range withAliases.publishes(t) {
		a := p.Properties.TopicAlias
		if a > 2 {
			t.Errorf("delivery %d: Topic Alias %d above the client's maximum 2", i, a)
		}
		switch {
		case i == 0 && (a == 0 || p.TopicName != topic):
			t.Errorf("first delivery: alias %d topic %q, want an alias with the topic name", a, p.TopicName)
		case i > 0 && (a != alias || p.TopicName != ""):
			t.Errorf("delivery %d: alias %d topic %q, want alias %d with a zero-length topic name", i, a, p.TopicName, alias)
		}
		if i == 0 {
			alias = a
		}
	}
}

// TestConformanceMaximumPacketSize: MQTT 5 3.1.2.11.4 Maximum Packet Size.
// "The Server MUST NOT send packets exceeding Maximum Packet Size to the
// Client" [MQTT-3.1.2-24]; "Where a Packet is too large to send, the Server
// MUST discard it without sending it and then behave as if it had completed
// sending that Application Message" [MQTT-3.1.2-25]. Other subscribers
// still get it.
func TestConformanceMaximumPacketSize(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/maxpkt/" + randHex(4)
		w := &wireConn{}
		id := "maxpkt-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}},
			&paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Properties: &paho.ConnectProperties{MaximumPacketSize: ptr(uint32(256))}})
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		big := newInbox()
		other := v5Sub(t, b.MQTTAddr(), "maxpkt-other-"+randHex(3), big)
		mustSubscribe(t, other, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})

		pub := connectV5(t, b.MQTTAddr(), "maxpkt-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: bytes.Repeat([]byte("x"), 1000)})
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("small")})
		if got := big.wait(t, 2, 10*time.Second); len(got[0].Payload) != 1000 {
			t.Fatalf("the subscriber without a limit got %d bytes first, want the 1000-byte message", len(got[0].Payload))
		}
		waitFor(t, 10*time.Second, "the small message", func() bool {
			ps := w.publishes(t)
			return len(ps) > 0 && string(ps[len(ps)-1].Payload) == "small"
		})
		for _, p := range w.packets(t) {
			if p.size > 256 {
				t.Fatalf("server sent a %d-byte packet (type %d) to a client with Maximum Packet Size 256", p.size, p.FixedHeader.Type)
			}
		}
		if n := len(w.publishes(t)); n != 1 {
			t.Fatalf("%d PUBLISH packets, want only the small one", n)
		}
		// The connection is still usable.
		mustPublish(t, c, &paho.Publish{Topic: topic + "/x", QoS: 1, Payload: []byte("alive")})
	})
}

// TestConformanceRequestResponse: MQTT 5 4.10 Request / Response and
// 3.3.2.3. "The Server MUST send the Response Topic unaltered to all
// subscribers receiving the Application Message" [MQTT-3.3.2-15]; "The
// Server MUST send the Correlation Data unaltered to all subscribers"
// [MQTT-3.3.2-16]; "The Server MUST send all User Properties unaltered in a
// PUBLISH packet when forwarding the Application Message to a Client"
// [MQTT-3.3.2-17] "and MUST maintain the order of User Properties"
// [MQTT-3.3.2-18]; Content Type [MQTT-3.3.2-20] and the Payload Format
// Indicator [MQTT-3.3.2-4] likewise. A responder answering on the Response
// Topic with the Correlation Data completes the exchange. QoS 0 and QoS 1
// (whose local delivery waits for Kafka and is re-injected by the hook).
func TestConformanceRequestResponse(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run("qos"+string(rune('0'+qos)), func(t *testing.T) { requestResponse(t, qos) })
	}
}

func requestResponse(t *testing.T, qos byte) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		reqTopic, respTopic := "conf/req/"+randHex(4), "conf/resp/"+randHex(4)
		requests := newInbox()
		responder := v5Sub(t, b.MQTTAddr(), "responder-"+randHex(3), requests)
		mustSubscribe(t, responder, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: reqTopic, QoS: qos}}})
		responses := newInbox()
		requester := v5Sub(t, b.MQTTAddr(), "requester-"+randHex(3), responses)
		mustSubscribe(t, requester, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: respTopic, QoS: qos}}})

		props := &paho.PublishProperties{ResponseTopic: respTopic, CorrelationData: []byte{0, 1, 2, 0xff},
			ContentType: "application/json", PayloadFormat: ptr(byte(1)),
			User: paho.UserProperties{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "a", Value: "3"}}}
		mustPublish(t, requester, &paho.Publish{Topic: reqTopic, QoS: qos, Payload: []byte(`{"q":1}`), Properties: props})
		req := requests.wait(t, 1, 10*time.Second)[0]
		p := req.Properties
		if p == nil {
			t.Fatal("request delivered without properties")
		}
		var user []string
		for _, u := range p.User {
			user = append(user, u.Key+"="+u.Value)
		}
		if p.ResponseTopic != respTopic || !bytes.Equal(p.CorrelationData, props.CorrelationData) || p.ContentType != "application/json" ||
			p.PayloadFormat == nil || *p.PayloadFormat != 1 || strings.Join(user, ",") != "a=1,b=2,a=3" {
			t.Fatalf("request properties: response topic %q, correlation %x, content type %q, payload format %v, user %v",
				p.ResponseTopic, p.CorrelationData, p.ContentType, p.PayloadFormat, user)
		}
		mustPublish(t, responder, &paho.Publish{Topic: p.ResponseTopic, QoS: qos, Payload: []byte(`{"a":1}`),
			Properties: &paho.PublishProperties{CorrelationData: p.CorrelationData}})
		resp := responses.wait(t, 1, 10*time.Second)[0]
		if resp.Properties == nil || !bytes.Equal(resp.Properties.CorrelationData, props.CorrelationData) {
			t.Fatalf("response correlation data: %+v", resp.Properties)
		}
	})
}

// TestConformanceSharedSubscriptions: MQTT 5 4.8.2 Shared Subscriptions.
// Each message matching a shared subscription "is sent to only one" of the
// sessions sharing it (4.8.2: "If there's a Shared Subscription in the
// Server State, a message that matches it is sent to only one of the
// Sessions attached to the Shared Subscription"), while a non-shared
// subscriber gets every message; retained messages are not sent when a
// shared subscription is made (3.3.1.3: "retained messages are not sent to
// the Session when it first subscribes to a shared subscription"
// [MQTT-3.8.4-... non-normative], 4.8.2).
func TestConformanceSharedSubscriptions(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/shared/" + randHex(4)
		pub := connectV5(t, b.MQTTAddr(), "shared-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("retained")})
		g1, g2, plain := newInbox(), newInbox(), newInbox()
		for i, in := range []*inbox{g1, g2} {
			c := v5Sub(t, b.MQTTAddr(), "shared-"+string(rune('a'+i))+randHex(3), in)
			mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/g/" + topic, QoS: 1}}})
		}
		pc := v5Sub(t, b.MQTTAddr(), "shared-plain-"+randHex(3), plain)
		mustSubscribe(t, pc, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1, RetainHandling: 2}}})
		const n = 20
		for i := range n {
			mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte{byte('A' + i)}})
		}
		plain.wait(t, n, 10*time.Second)
		waitFor(t, 10*time.Second, "every message in the group", func() bool { return len(g1.all())+len(g2.all()) >= n })
		seen := map[string]int{}
		for _, m := range append(g1.all(), g2.all()...) {
			seen[string(m.Payload)]++
		}
		if seen["retained"] > 0 {
			t.Errorf("a shared subscription received the retained message")
		}
		for i := range n {
			if c := seen[string(rune('A'+i))]; c != 1 {
				t.Errorf("message %c delivered %d times in the share group, want once", 'A'+i, c)
			}
		}
		if len(g1.all()) == 0 || len(g2.all()) == 0 {
			t.Logf("distribution: %d / %d (mochi picks one member per message)", len(g1.all()), len(g2.all()))
		}
	})
}

// TestConformanceUnsubscribe: MQTT 5 3.10.4 / 3.11.3. After UNSUBSCRIBE
// the Server "MUST stop adding any new messages which match the Topic
// Filters, for delivery to the Client" [MQTT-3.10.4-2] and answers with an
// UNSUBACK holding a reason code per filter [MQTT-3.11.3-1]: 0x00 Success,
// 0x11 No subscription existed.
func TestConformanceUnsubscribe(t *testing.T) {
	b := startBridge(t, testConfig(""))
	topic := "conf/unsub/" + randHex(4)
	in := newInbox()
	c := v5Sub(t, b.MQTTAddr(), "unsub-"+randHex(3), in)
	mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}, {Topic: topic + "/marker", QoS: 1}}})
	pub := connectV5(t, b.MQTTAddr(), "unsub-pub-"+randHex(3))
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("before")})
	in.wait(t, 1, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ua, err := c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic, "conf/never/subscribed"}})
	if err != nil && ua == nil {
		t.Fatalf("unsubscribe: %v", err)
	}
	if want := []byte{0x00, 0x11}; !bytes.Equal(ua.Reasons, want) {
		t.Fatalf("UNSUBACK reasons %#v, want %#v", ua.Reasons, want)
	}
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("after")})
	mustPublish(t, pub, &paho.Publish{Topic: topic + "/marker", QoS: 1, Payload: []byte("marker")})
	got := in.wait(t, 2, 10*time.Second)
	if string(got[1].Payload) != "marker" {
		t.Fatalf("after UNSUBSCRIBE received %q, want only the marker", got[1].Payload)
	}
}

// TestConformanceReceiveMaximum: MQTT 5 3.3.4 / 4.9 Flow Control.
// "The Server MUST NOT send more than Receive Maximum QoS 1 and QoS 2
// PUBLISH packets for which it has not received PUBACK, PUBCOMP, or PUBREC
// with a Reason Code of 128 or greater from the Client" [MQTT-3.3.4-9].
func TestConformanceReceiveMaximum(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/recvmax/" + randHex(4)
		w := &wireConn{}
		id := "recvmax-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w, EnableManualAcknowledgment: true,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}},
			&paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true, Properties: &paho.ConnectProperties{ReceiveMaximum: ptr(uint16(2))}})
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		marker := newInbox()
		mc := v5Sub(t, b.MQTTAddr(), "recvmax-m-"+randHex(3), marker)
		mustSubscribe(t, mc, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		pub := connectV5(t, b.MQTTAddr(), "recvmax-pub-"+randHex(3))
		for i := range 5 {
			mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte{byte('0' + i)}})
		}
		// Another subscriber has them all: delivery to this one had its chance.
		marker.wait(t, 5, 10*time.Second)
		waitFor(t, 10*time.Second, "deliveries", func() bool { return len(w.publishes(t)) >= 2 })
		if n := len(w.publishes(t)); n > 2 {
			t.Fatalf("%d unacknowledged QoS 1 PUBLISH packets sent to a client with Receive Maximum 2", n)
		}
	})
}

// TestConformanceQoS2Delivery: MQTT 5 4.3.3 QoS 2: Exactly once delivery.
// A QoS 2 message reaches a QoS 2 subscriber once, at QoS 2 (the publisher's
// PUBREC waits for Kafka), and a QoS 1 subscriber at QoS 1 ("the QoS of
// Application Messages sent in response to a Subscription MUST be the
// minimum of the QoS of the originally published message and the Maximum
// QoS granted by the Server" [MQTT-3.8.4-8]).
func TestConformanceQoS2Delivery(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/qos2/" + randHex(4)
		q2, q1 := newInbox(), newInbox()
		s2 := v5Sub(t, b.MQTTAddr(), "qos2-s2-"+randHex(3), q2)
		s1 := v5Sub(t, b.MQTTAddr(), "qos2-s1-"+randHex(3), q1)
		mustSubscribe(t, s2, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 2}, {Topic: topic + "/marker", QoS: 2}}})
		mustSubscribe(t, s1, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		pub := connectV5(t, b.MQTTAddr(), "qos2-pub-"+randHex(3))
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 2, Payload: []byte("once")})
		mustPublish(t, pub, &paho.Publish{Topic: topic + "/marker", QoS: 2, Payload: []byte("marker")})
		got := q2.wait(t, 2, 10*time.Second)
		if string(got[0].Payload) != "once" || got[0].QoS != 2 || string(got[1].Payload) != "marker" {
			t.Fatalf("QoS 2 subscriber got %q at QoS %d then %q, want \"once\" at QoS 2 once, then the marker", got[0].Payload, got[0].QoS, got[1].Payload)
		}
		if m := q1.wait(t, 1, 10*time.Second)[0]; m.QoS != 1 {
			t.Fatalf("QoS 1 subscriber got QoS %d", m.QoS)
		}
		recs := readTopic(t, b.KafkaBrokers(), kafkaName(t, topic), 1, 20*time.Second)
		if string(recs[0].Value) != "once" {
			t.Fatalf("Kafka record %q", recs[0].Value)
		}
	})
}
