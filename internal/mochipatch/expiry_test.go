package mochipatch

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// servingServer is a quiet mochi server with its default capabilities
// (MaximumMessageExpiryInterval a day), or maxExpiry when not 0, allowing
// everyone, serving MQTT on a local port; it returns the address.
func servingServer(t *testing.T, maxExpiry int64) (*mqtt.Server, string) {
	t.Helper()
	s := quietServer()
	if maxExpiry != 0 {
		s.Options.Capabilities.MaximumMessageExpiryInterval = maxExpiry
	}
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0"})
	if err := s.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, l.Address()
}

// v5Client connects an MQTT 5 client over conn (dialled to addr when nil);
// every PUBLISH it receives goes to got.
func v5Client(t *testing.T, addr, id string, conn net.Conn, got chan<- *paho.Publish, cp *paho.Connect) *paho.Client {
	t.Helper()
	if conn == nil {
		var err error
		if conn, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: id, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if got != nil {
				got <- pr.Packet
			}
			return true, nil
		}}})
	if cp == nil {
		cp = &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, cp); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

func subscribe(t *testing.T, c *paho.Client, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, c *paho.Client, p *paho.Publish) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// receive returns the next message on topic within 5 s.
func receive(t *testing.T, got <-chan *paho.Publish, topic string) *paho.Publish {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case p := <-got:
			if p.Topic == topic {
				return p
			}
		case <-deadline:
			t.Fatalf("no message on %s within 5 s", topic)
			return nil
		}
	}
}

func expiryOf(p *paho.Publish) any {
	if p.Properties == nil || p.Properties.MessageExpiry == nil {
		return nil
	}
	return *p.Properties.MessageExpiry
}

// TestNoMessageExpiryUnlessAsked: MQTT 5 3.3.2.3.3, "If absent, the
// Application Message does not expire", and the server forwards the
// interval the publisher set, less the time the message waited
// [MQTT-3.3.2-6]. Upstream applied MaximumMessageExpiryInterval (a day by
// default) as an expiry to every message that asked none: each PUBLISH to
// an MQTT 5 subscriber carried Message Expiry Interval 86400, live and
// retained. With a maximum of 5 s, a message asking 10 s gets 5 s, and one
// asking none still gets none.
func TestNoMessageExpiryUnlessAsked(t *testing.T) {
	_, addr := servingServer(t, 0)
	got := make(chan *paho.Publish, 16)
	sub := v5Client(t, addr, "sub", nil, got, nil)
	subscribe(t, sub, "e/#")
	pub := v5Client(t, addr, "pub", nil, nil, nil)
	publish(t, pub, &paho.Publish{Topic: "e/none", QoS: 1, Payload: []byte("x"), Retain: true})
	publish(t, pub, &paho.Publish{Topic: "e/ten", QoS: 1, Payload: []byte("y"),
		Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](10)}})
	if e := expiryOf(receive(t, got, "e/none")); e != nil {
		t.Errorf("published without a Message Expiry Interval, delivered with %v", e)
	}
	if e, _ := expiryOf(receive(t, got, "e/ten")).(uint32); e < 9 || e > 10 {
		t.Errorf("published with Message Expiry Interval 10, delivered with %v", expiryOf(receive(t, got, "e/ten")))
	}
	got2 := make(chan *paho.Publish, 16)
	subscribe(t, v5Client(t, addr, "late", nil, got2, nil), "e/#")
	if e := expiryOf(receive(t, got2, "e/none")); e != nil {
		t.Errorf("retained without a Message Expiry Interval, delivered with %v", e)
	}

	_, addr = servingServer(t, 5)
	got = make(chan *paho.Publish, 16)
	subscribe(t, v5Client(t, addr, "sub", nil, got, nil), "e/#")
	pub = v5Client(t, addr, "pub", nil, nil, nil)
	publish(t, pub, &paho.Publish{Topic: "e/capped", QoS: 1, Payload: []byte("z"),
		Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](10)}})
	publish(t, pub, &paho.Publish{Topic: "e/none2", QoS: 1, Payload: []byte("w")})
	if e, _ := expiryOf(receive(t, got, "e/capped")).(uint32); e < 4 || e > 5 {
		t.Errorf("asked 10 s with a maximum of 5 s: delivered with %v, want 5", e)
	}
	if e := expiryOf(receive(t, got, "e/none2")); e != nil {
		t.Errorf("asked none with a maximum of 5 s: delivered with %v, want none", e)
	}
}

// TestOldMessagesDoNotExpireUnlessAsked: a retained message and a delivery
// in flight that asked no expiry stay however old they are. Upstream
// removed every retained message and every in-flight delivery older than
// MaximumMessageExpiryInterval (a day), and reported the in-flight drop as
// OnQosDropped. The server's once-a-second sweep is watched by a retained
// message that did ask, and expired: once it is gone, the sweep ran.
func TestOldMessagesDoNotExpireUnlessAsked(t *testing.T) {
	s, _ := servingServer(t, 0)
	now := time.Now().Unix()
	old := now - 25*3600
	retained := func(topic string, expiry int64) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: topic,
			Payload: []byte("x"), Created: old, Expiry: expiry, ProtocolVersion: 5}
	}
	s.Topics.RetainMessage(retained("r/old", 0))
	s.Topics.RetainMessage(retained("r/expired", now-1))
	for range 100 {
		if _, ok := s.Topics.Retained.Get("r/expired"); !ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := s.Topics.Retained.Get("r/expired"); ok {
		t.Fatal("the retained message that asked an expiry and expired is still there after 5 s: the sweep did not run")
	}
	if _, ok := s.Topics.Retained.Get("r/old"); !ok {
		t.Error("a retained message 25 h old that asked no expiry was removed")
	}

	cl := s.NewClient(nil, "test", "c", true)
	cl.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		ProtocolVersion: 5, TopicName: "a/b", Created: old})
	if d := cl.ClearExpiredInflights(now, s.Options.Capabilities.MaximumMessageExpiryInterval); len(d) != 0 {
		t.Errorf("a delivery in flight for 25 h that asked no expiry was dropped (%v)", d)
	}
}

// TestWillKeepsItsProperties: MQTT 5 3.1.3.2, the Will Properties a Will
// Message is published with: Message Expiry Interval (sent as the
// publication's, "3.1.3.2.4"), Payload Format Indicator, Content Type,
// Response Topic, Correlation Data and User Properties. Upstream kept the
// User Properties only, and sent a Message Expiry Interval of 86400 (the
// default maximum) for an immediate Will and of 1 (what was left of its
// delay) for a delayed one.
func TestWillKeepsItsProperties(t *testing.T) {
	_, addr := servingServer(t, 0)
	got := make(chan *paho.Publish, 16)
	subscribe(t, v5Client(t, addr, "sub", nil, got, nil), "w/#")
	for _, delay := range []uint32{0, 1} {
		topic := "w/" + string(rune('a'+delay))
		// paho.golang drops the Will Properties a CONNECT does not have
		// (it packs them as a CONNECT's): a raw CONNECT.
		conn := willConnect(t, addr, "will-"+topic, packets.Properties{WillDelayInterval: delay,
			MessageExpiryInterval: 10, PayloadFormat: 1, PayloadFormatFlag: true, ContentType: "text/plain",
			ResponseTopic: "w/reply", CorrelationData: []byte("corr"), User: []packets.UserProperty{{Key: "k", Val: "v"}}},
			topic)
		_ = conn.Close() // no DISCONNECT: the Will is published
		p := receive(t, got, topic)
		pp := p.Properties
		if pp == nil {
			t.Fatalf("delay %d: the Will arrived without properties", delay)
		}
		if e, _ := expiryOf(p).(uint32); e < 9 || e > 10 {
			t.Errorf("delay %d: Will Message Expiry Interval 10, delivered with %v", delay, expiryOf(p))
		}
		if pp.PayloadFormat == nil || *pp.PayloadFormat != 1 || pp.ContentType != "text/plain" || pp.ResponseTopic != "w/reply" ||
			string(pp.CorrelationData) != "corr" || pp.User.Get("k") != "v" {
			t.Errorf("delay %d: Will properties delivered: payload format %v, content type %q, response topic %q, correlation data %q, user %v",
				delay, pp.PayloadFormat, pp.ContentType, pp.ResponseTopic, pp.CorrelationData, pp.User)
		}
	}
}

// willConnect connects an MQTT 5 client (session expiry 60 s) on a raw
// connection with a QoS 1 Will on topic with the Will Properties wp, and
// waits for its CONNACK 0.
func willConnect(t *testing.T, addr, id string, wp packets.Properties, topic string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cp := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5, Mods: packets.Mods{AllowResponseInfo: true},
		Properties: packets.Properties{SessionExpiryInterval: 60, SessionExpiryIntervalFlag: true},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id,
			WillFlag: true, WillTopic: topic, WillPayload: []byte("gone"), WillQos: 1, WillProperties: wp}}
	var b bytes.Buffer
	if err := cp.ConnectEncode(&b); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4) // fixed header, length, flags, reason code
	if _, err := io.ReadFull(conn, ack); err != nil || ack[0]>>4 != packets.Connack || ack[3] != 0 {
		t.Fatalf("CONNACK of %s: % x, %v", id, ack, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn
}

func ptr[T any](v T) *T { return &v }
