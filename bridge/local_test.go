package bridge

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestV5ReservedUserPropertiesDropped: user properties named like Ferry's
// own headers (mqtt.*, ferry.*) or a rule's header never reach Kafka: the
// record carries each of those once, with the bridge's value; the others
// are kept, and the dropped ones are counted.
func TestV5ReservedUserPropertiesDropped(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cfg := testConfig(brokers)
	prefix := "spoof" + randHex(4)
	ktopic := kafkatest.Topic(t, "spoof")
	cfg.Topics.Forward = []topicmap.ForwardRule{{Filter: prefix + "/+", Topic: ktopic, Headers: map[string]string{"site": "hq"}}}
	b := startBridge(t, cfg)
	topic := prefix + "/dev1"
	c := connectV5(t, b.MQTTAddr(), "spoofer")
	res, err := c.Publish(context.Background(), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x"),
		Properties: &paho.PublishProperties{User: paho.UserProperties{
			{Key: topicmap.HeaderOrigin, Value: "other-instance"},
			{Key: topicmap.HeaderMQTTTopic, Value: "some/where/else"},
			{Key: topicmap.HeaderRetain, Value: "true"},
			{Key: "site", Value: "evil"},
			{Key: "unit", Value: "C"},
		}}})
	if err != nil || res.ReasonCode != 0 {
		t.Fatalf("v5 publish: %v (reason %v)", err, res)
	}
	m := readTopic(t, b.KafkaBrokers(), ktopic, 1, 20*time.Second)[0]
	count := map[string][]string{}
	for _, h := range m.Headers {
		count[h.Key] = append(count[h.Key], string(h.Value))
	}
	for key, want := range map[string][]string{
		topicmap.HeaderOrigin:    {b.InstanceID()},
		topicmap.HeaderMQTTTopic: {topic},
		topicmap.HeaderRetain:    nil,
		"site":                   {"hq"},
		"unit":                   {"C"},
	} {
		if !slices.Equal(count[key], want) {
			t.Errorf("header %s = %q, want %q", key, count[key], want)
		}
	}
	if got := metricValue(t, b, "ferry_reserved_properties_dropped_total", nil); got != 4 {
		t.Errorf("ferry_reserved_properties_dropped_total = %v, want 4", got)
	}
}

// TestV5LocalDeliveryKeepsOriginAndProperties: a QoS 1 publish delivered
// to this broker's subscribers after Kafka's acknowledgement keeps its
// origin (so a No Local subscription of the publisher does not get it back)
// and every property of the original; each subscriber gets its own
// subscription identifier.
func TestV5LocalDeliveryKeepsOriginAndProperties(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	topic := uniqueTopic("nolocal")
	ctx := context.Background()

	pubGot := make(chan *paho.Publish, 10)
	pub := connectV5(t, b.MQTTAddr(), "nolocal-pub", func(cc *paho.ClientConfig, _ *paho.Connect) {
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			pubGot <- pr.Packet
			return true, nil
		}}
	})
	otherGot := make(chan *paho.Publish, 10)
	other := connectV5(t, b.MQTTAddr(), "nolocal-other", func(cc *paho.ClientConfig, _ *paho.Connect) {
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			otherGot <- pr.Packet
			return true, nil
		}}
	})
	subscribe := func(c *paho.Client, id int, noLocal bool) {
		t.Helper()
		sa, err := c.Subscribe(ctx, &paho.Subscribe{Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &id},
			Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1, NoLocal: noLocal}}})
		if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
			t.Fatalf("subscribe: %v %+v", err, sa)
		}
	}
	subscribe(pub, 3, true)
	subscribe(other, 7, false)

	expiry := uint32(600)
	format := byte(1)
	props := &paho.PublishProperties{PayloadFormat: &format, MessageExpiry: &expiry, ContentType: "text/plain",
		ResponseTopic: "reply/to/me", CorrelationData: []byte{1, 2, 3},
		User: paho.UserProperties{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}}
	if res, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("mine"), Properties: props}); err != nil || res.ReasonCode != 0 {
		t.Fatalf("publish: %v %v", err, res)
	}
	var m *paho.Publish
	select {
	case m = <-otherGot:
	case <-time.After(10 * time.Second):
		t.Fatal("the other subscriber got nothing")
	}
	p := m.Properties
	switch {
	case string(m.Payload) != "mine":
		t.Errorf("payload %q", m.Payload)
	case p == nil:
		t.Fatal("delivered without properties")
	case p.PayloadFormat == nil || *p.PayloadFormat != 1:
		t.Errorf("payload format indicator lost: %v", p.PayloadFormat)
	case p.MessageExpiry == nil || *p.MessageExpiry == 0 || *p.MessageExpiry > expiry:
		t.Errorf("message expiry interval = %v, want 1..%d", p.MessageExpiry, expiry)
	case p.ContentType != "text/plain" || p.ResponseTopic != "reply/to/me" || !bytes.Equal(p.CorrelationData, []byte{1, 2, 3}):
		t.Errorf("content type %q, response topic %q, correlation data %x", p.ContentType, p.ResponseTopic, p.CorrelationData)
	case !slices.Equal(p.User, props.User):
		t.Errorf("user properties %v, want %v", p.User, props.User)
	case p.SubscriptionIdentifier == nil || *p.SubscriptionIdentifier != 7:
		t.Errorf("subscription identifier %v, want 7", p.SubscriptionIdentifier)
	}
	// A message from someone else reaches the No Local subscriber; had the
	// first come back to its publisher, it would be ahead of this one.
	if res, err := other.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("theirs")}); err != nil || res.ReasonCode != 0 {
		t.Fatalf("publish: %v %v", err, res)
	}
	select {
	case m := <-pubGot:
		if string(m.Payload) != "theirs" {
			t.Fatalf("the publisher's No Local subscription got %q back", m.Payload)
		}
		if m.Properties == nil || m.Properties.SubscriptionIdentifier == nil || *m.Properties.SubscriptionIdentifier != 3 {
			t.Errorf("subscription identifier %+v, want 3", m.Properties)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the No Local subscriber did not get another client's message")
	}
}

// TestV5MessageExpiryOfflineSubscriber: a QoS 1 message with a Message
// Expiry Interval of 1 s, queued for an offline subscriber, is not
// delivered when the subscriber comes back after it expired
// [MQTT-3.3.2-5]; a message published after the reconnect is.
func TestV5MessageExpiryOfflineSubscriber(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	topic := uniqueTopic("expiry")
	id := "expiry-sub-" + randHex(3)
	session := packets.Properties{SessionExpiryInterval: 300, SessionExpiryIntervalFlag: true}
	sub := dialLight5(t, b.MQTTAddr(), id, true, session)
	sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: topic, Qos: 1}}})
	if pk, _ := sub.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("want SUBACK, got type %d", pk.FixedHeader.Type)
	}
	sub.close()
	waitFor(t, 10*time.Second, "the subscriber's connection to end", func() bool {
		return sessionOffline(b, id)
	})

	pub := connectV5(t, b.MQTTAddr(), "expiry-pub")
	ctx := context.Background()
	expiry := uint32(1)
	published := time.Now()
	if res, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("short-lived"),
		Properties: &paho.PublishProperties{MessageExpiry: &expiry}}); err != nil || res.ReasonCode != 0 {
		t.Fatalf("publish: %v %v", err, res)
	}
	// The interval counts from the broker's receipt, which comes before its
	// PUBACK: 1 s after the PUBACK it has passed however late the broker
	// read the publish (from the test's time before it, a receipt delayed
	// by more than the 0.5 s of margin on a loaded machine left the message
	// unexpired).
	acked := time.Now()
	// The offline session's queue is its position in Kafka: nothing is
	// queued in memory, and the replay on resume leaves out what expired.
	if cl, ok := b.server.Clients.Get(id); ok && cl.State.Inflight.Len() != 0 {
		t.Fatalf("%d messages queued in memory for the offline session, want 0", cl.State.Inflight.Len())
	}
	time.Sleep(time.Until(acked.Add(1100 * time.Millisecond))) // let the expiry pass

	sub = dialLight5(t, b.MQTTAddr(), id, false, session)
	if res, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("after")}); err != nil || res.ReasonCode != 0 {
		t.Fatalf("publish: %v %v", err, res)
	}
	pk, _ := sub.next(t, 5, 10*time.Second)
	if pk.FixedHeader.Type != packets.Publish || string(pk.Payload) != "after" {
		t.Fatalf("after reconnecting %s after an expiry of 1 s: got type %d payload %q, want only the later message",
			time.Since(published).Round(time.Millisecond), pk.FixedHeader.Type, pk.Payload)
	}
}

// TestOfflineSessionIsItsRecord: once a persistent session's client has
// gone and its record is written, its owner keeps no broker client and no
// session object for it; a resume on the same instance is rebuilt from
// the record: Session Present 1, its subscription, and the message queued
// meanwhile.
func TestOfflineSessionIsItsRecord(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	b := startBridge(t, testConfig(brokers))
	id, topic := "rec-"+randHex(4), "rec/"+randHex(4)
	sub := connectPaho(t, b.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
	if tok := sub.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	owned := b.stateEngine.Owned()
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "the session offline", func() bool { return sessionOffline(b, id) })
	// Its record is written first, then the copies go.
	waitFor(t, 10*time.Second, "the broker and the engine holding nothing of the offline session", func() bool {
		_, held := b.server.Clients.Get(id)
		return !held && b.stateEngine.Owned() == owned-1
	})
	pub := connectPaho(t, b.MQTTAddr(), "pub-"+randHex(4))
	if tok := pub.Publish(topic, 1, false, "queued"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	got := make(chan string, 4)
	again := pahov3.NewClient(pahov3.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID(id).
		SetCleanSession(false).SetAutoReconnect(false).
		SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) { got <- string(m.Payload()) }))
	tok := again.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("reconnect: %v", tok.Error())
	}
	defer again.Disconnect(100)
	if !tok.(*pahov3.ConnectToken).SessionPresent() {
		t.Fatal("Session Present 0 on the instance that owned the session")
	}
	select {
	case m := <-got:
		if m != "queued" {
			t.Fatalf("resume delivered %q, want the queued message", m)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the message queued while the session was offline never came")
	}
}
