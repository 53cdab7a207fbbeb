package bridge

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	pahopackets "github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// dropConn closes a v5 client's TCP connection without DISCONNECT (a
// network failure, as the server sees it).
func dropConn(w *wireConn) { _ = w.Conn.Close() }

// TestConformanceWill: MQTT 5 3.1.2.5 Will Flag. "the Will Message MUST be
// published after the Network Connection is subsequently closed and either
// the Will Delay Interval has elapsed or the Session ends, unless the Will
// Message has been deleted by the Server on receipt of a DISCONNECT packet
// with Reason Code 0x00 (Normal disconnection)" [MQTT-3.1.2-8]; a normal
// DISCONNECT deletes it [MQTT-3.1.2-10].
func TestConformanceWill(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		b := startBridge(t, cfg)
		topic := "conf/will/" + randHex(4)
		in := newInbox()
		sub := v5Sub(t, b.MQTTAddr(), "will-sub-"+randHex(3), in)
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})

		// A normal DISCONNECT: no Will.
		id := "will-clean-" + randHex(3)
		c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
			WillMessage: &paho.WillMessage{Topic: topic, QoS: 1, Payload: []byte("clean")}})
		if err := c.Disconnect(&paho.Disconnect{ReasonCode: 0}); err != nil {
			t.Fatal(err)
		}
		// A dropped connection: the Will is published.
		w := &wireConn{}
		id = "will-drop-" + randHex(3)
		dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
			WillMessage: &paho.WillMessage{Topic: topic, QoS: 1, Payload: []byte("dropped")}})
		dropConn(w)
		got := in.wait(t, 1, 10*time.Second)
		if string(got[0].Payload) != "dropped" {
			t.Fatalf("first Will received: %q, want \"dropped\" (a normal DISCONNECT deletes the Will)", got[0].Payload)
		}
	})
}

// TestConformanceWillDelay: MQTT 5 3.1.3.2.2 Will Delay Interval. "The
// Server delays publishing the Client's Will Message until the Will Delay
// Interval has passed or the Session ends, whichever happens first. If a
// new Network Connection to this Session is made before the Will Delay
// Interval has passed, the Server MUST NOT send the Will Message"
// [MQTT-3.1.3-9].
func TestConformanceWillDelay(t *testing.T) {
	b := startBridge(t, testConfig(""))
	topic := "conf/willdelay/" + randHex(4)
	in := newInbox()
	sub := v5Sub(t, b.MQTTAddr(), "wd-sub-"+randHex(3), in)
	mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
	connect := func(id, payload string, w *wireConn) {
		dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties:     &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(30))},
			WillMessage:    &paho.WillMessage{Topic: topic, QoS: 1, Payload: []byte(payload)},
			WillProperties: &paho.WillProperties{WillDelayInterval: ptr(uint32(2))}})
	}
	// Reconnected within the delay: never sent.
	resumed := "wd-resumed-" + randHex(3)
	w1 := &wireConn{}
	connect(resumed, "resumed", w1)
	dropConn(w1)
	connect(resumed, "resumed-2", &wireConn{})
	// Not reconnected: sent after the delay, not before.
	gone := "wd-gone-" + randHex(3)
	w2 := &wireConn{}
	connect(gone, "gone", w2)
	dropped := time.Now()
	dropConn(w2)
	got := in.wait(t, 1, 10*time.Second)
	if d := time.Since(dropped); d < 2*time.Second {
		t.Errorf("Will published %s after the connection dropped, before the Will Delay Interval of 2s", d)
	}
	if string(got[0].Payload) != "gone" {
		t.Fatalf("Will received: %q, want \"gone\" (the resumed session's Will must not be sent)", got[0].Payload)
	}
	// Give the resumed session's first Will (dropped earlier) time to fire
	// wrongly: its delay has passed too, so a marker after it is conclusive.
	pub := connectV5(t, b.MQTTAddr(), "wd-pub-"+randHex(3))
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("marker")})
	got = in.wait(t, 2, 10*time.Second)
	if string(got[1].Payload) != "marker" {
		t.Fatalf("after the Will, received %q, want only the marker", got[1].Payload)
	}
}

// TestConformanceSessionExpiry: MQTT 5 3.1.2.11.2 Session Expiry Interval
// and 3.2.2.1.1 Session Present. A session is kept after the connection
// closes until the interval passes: a client resuming it before gets
// Session Present 1 [MQTT-3.2.2-3] and its subscriptions; after it, Session
// Present 0 [MQTT-3.2.2-2]. Session Expiry Interval 0 (absent): "the
// Session ends when the Network Connection is closed".
func TestConformanceSessionExpiry(t *testing.T) {
	b := startBridge(t, testConfig(""))
	connect := func(id string, expiry uint32) *paho.Connack {
		_, ca := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(expiry)}})
		return ca
	}
	disconnect := func(id string, expiry uint32) {
		c, ca := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(expiry)}})
		_ = ca
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "conf/se/" + id, QoS: 1}}})
		if err := c.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
	}
	kept, short, none := "se-kept-"+randHex(3), "se-short-"+randHex(3), "se-none-"+randHex(3)
	disconnect(kept, 60)
	disconnect(short, 1)
	disconnect(none, 0)
	if ca := connect(kept, 60); !ca.SessionPresent {
		t.Error("session with expiry 60s resumed at once: Session Present 0, want 1")
	}
	if ca := connect(none, 0); ca.SessionPresent {
		t.Error("session with expiry 0 resumed: Session Present 1, want 0")
	}
	// The expired-session sweep (session/wills_sweep.go, once a second) deletes
	// its record: wait until it has, then resume.
	waitFor(t, 10*time.Second, "the 1s session to expire", func() bool {
		return b.stateEngine.Lookup(short) == nil
	})
	if ca := connect(short, 0); ca.SessionPresent {
		t.Error("session with expiry 1s resumed after it expired: Session Present 1, want 0")
	}
}

// TestConformanceOfflineQueue: MQTT 5 3.1.2.11.2 / 4.1: the Session State
// in the Server includes "QoS 1 and QoS 2 messages which have been sent to
// the Client, but have not been completely acknowledged" and "QoS 1 and QoS
// 2 messages pending transmission to the Client". Messages published while
// the subscriber is away are delivered when it resumes the session; a
// message sent but not acknowledged before the connection dropped is sent
// again with DUP 1: "When a Client reconnects with Clean Start set to 0 and
// a session is present, both the Client and Server MUST resend any
// unacknowledged PUBLISH packets (where QoS > 0) ... using their original
// Packet Identifiers" [MQTT-4.4.0-1]; "The DUP flag MUST be set to 1 by the
// Client or Server when it attempts to re-deliver a PUBLISH packet"
// [MQTT-3.3.1-1]. The order of the resent messages is checked by
// TestConformanceMochiResendOrder (a mochi bug).
func TestConformanceOfflineQueue(t *testing.T) {
	kafkaModes(t, func(t *testing.T, cfg Config) {
		first, resumed := offlineQueue(t, cfg)
		byPayload := map[string]wirePacket{}
		for _, p := range resumed {
			byPayload[string(p.Payload)] = p
		}
		if len(resumed) != 3 || len(byPayload) != 3 {
			t.Fatalf("%d deliveries on resume (%d distinct), want unacked, q1, q2 once each", len(resumed), len(byPayload))
		}
		re, ok := byPayload["unacked"]
		if !ok || !re.FixedHeader.Dup || re.PacketID != first.PacketID {
			t.Errorf("redelivery of the unacknowledged message: %+v, want DUP 1 and the original packet id %d", re.FixedHeader, first.PacketID)
		}
		for _, q := range []string{"q1", "q2"} {
			if _, ok := byPayload[q]; !ok {
				t.Errorf("%s, queued while offline, not delivered", q)
			}
		}
	})
}

// offlineQueue: a QoS 1 subscriber receives "unacked" without
// acknowledging it, its connection drops, "q1" and "q2" are published, and
// it resumes its session. It returns the first delivery and the PUBLISH
// packets received on resume.
func offlineQueue(t *testing.T, cfg Config) (wirePacket, []wirePacket) {
	t.Helper()
	b := startBridge(t, cfg)
	topic := "conf/offline/" + randHex(4)
	id := "offq-" + randHex(3)
	cp := func() *paho.Connect {
		return &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(60))}}
	}
	w1 := &wireConn{}
	c, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w1, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}}, cp())
	mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
	pub := connectV5(t, b.MQTTAddr(), "offq-pub-"+randHex(3))
	mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("unacked")})
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return len(w1.publishes(t)) == 1 })
	first := w1.publishes(t)[0]
	if first.FixedHeader.Dup {
		t.Fatal("first delivery has DUP 1")
	}
	dropConn(w1)
	waitFor(t, 10*time.Second, "the server to see the drop", func() bool {
		return sessionOffline(b, id)
	})
	for _, p := range []string{"q1", "q2"} {
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(p)})
	}
	w2 := &wireConn{}
	_, ca := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, Conn: w2}, cp())
	if !ca.SessionPresent {
		t.Fatal("Session Present 0 on resume")
	}
	waitFor(t, 10*time.Second, "three deliveries on resume", func() bool { return len(w2.publishes(t)) >= 3 })
	// Anything more (a duplicate) would have come with the three.
	pub2 := connectV5(t, b.MQTTAddr(), "offq-pub2-"+randHex(3))
	mustPublish(t, pub2, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("marker")})
	waitFor(t, 10*time.Second, "the marker", func() bool {
		for _, p := range w2.publishes(t) {
			if string(p.Payload) == "marker" {
				return true
			}
		}
		return false
	})
	var resumed []wirePacket
	for _, p := range w2.publishes(t) {
		if string(p.Payload) != "marker" {
			resumed = append(resumed, p)
		}
	}
	return first, resumed
}

// TestConformanceKeepAliveTimeout: MQTT 5 3.1.2.10 Keep Alive. "If the Keep
// Alive value is non-zero and the Server does not receive an MQTT Control
// Packet from the Client within one and a half times the Keep Alive time
// period, it MUST close the Network Connection to the Client as if the
// network had failed" [MQTT-3.1.2-22] (and so publish its Will).
func TestConformanceKeepAliveTimeout(t *testing.T) {
	b := startBridge(t, testConfig(""))
	topic := "conf/ka/" + randHex(4)
	in := newInbox()
	sub := v5Sub(t, b.MQTTAddr(), "ka-sub-"+randHex(3), in)
	mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 0}}})
	lost := make(chan time.Time, 1)
	id := "ka-silent-" + randHex(3)
	start := time.Now()
	dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, PingHandler: new(silentPinger), OnClientError: func(error) {
		select {
		case lost <- time.Now():
		default:
		}
	}}, &paho.Connect{ClientID: id, KeepAlive: 2, CleanStart: true, WillMessage: &paho.WillMessage{Topic: topic, Payload: []byte("timed out")}})
	select {
	case at := <-lost:
		// Not before 1.5 x 2 s; the upper bound is the 20 s below (how
		// late is scheduling on a shared machine, not protocol).
		if d := at.Sub(start); d < 2500*time.Millisecond {
			t.Fatalf("closed after %s, want about 3s (1.5 x keep alive 2s)", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("silent client with keep alive 2s not disconnected within 20s")
	}
	if got := in.wait(t, 1, 10*time.Second); string(got[0].Payload) != "timed out" {
		t.Fatalf("Will after keep alive timeout: %q", got[0].Payload)
	}
}

// TestConformanceAssignedClientID: MQTT 5 3.1.3.1. "A Server MAY allow a
// Client to supply a ClientID that has a length of zero bytes, however if
// it does so the Server MUST treat this as a special case and assign a
// unique ClientID to that Client [MQTT-3.1.3-6]. It MUST then process the
// CONNECT packet as if the Client had provided that unique ClientID, and
// MUST return the Assigned Client Identifier in the CONNACK packet
// [MQTT-3.1.3-7]."
func TestConformanceAssignedClientID(t *testing.T) {
	b := startBridge(t, testConfig(""))
	seen := map[string]bool{}
	for range 2 {
		c, ca := dialV5(t, b.MQTTAddr(), paho.ClientConfig{}, &paho.Connect{KeepAlive: 30, CleanStart: true})
		if ca.ReasonCode != 0 || ca.Properties == nil || ca.Properties.AssignedClientID == "" {
			t.Fatalf("empty client id: CONNACK %+v, want success with an Assigned Client Identifier", ca)
		}
		if seen[ca.Properties.AssignedClientID] {
			t.Fatalf("assigned client id %q given twice", ca.Properties.AssignedClientID)
		}
		seen[ca.Properties.AssignedClientID] = true
		// The connection works under its assigned id.
		mustPublish(t, c, &paho.Publish{Topic: "conf/assigned", QoS: 1, Payload: []byte("x")})
		if _, ok := b.server.Clients.Get(ca.Properties.AssignedClientID); !ok {
			t.Fatalf("no session under the assigned id %q", ca.Properties.AssignedClientID)
		}
	}
}

// TestConformanceZeroLengthClientIDV311: MQTT 3.1.1 3.1.3.1. "A Server MAY
// allow a Client to supply a ClientId that has a length of zero bytes,
// however if it does so the Server MUST treat this as a special case and
// assign a unique ClientId to that Client [MQTT-3.1.3-6]." "If the Client
// supplies a zero-byte ClientId with CleanSession set to 0, the Server MUST
// respond to the CONNECT Packet with a CONNACK return code 0x02 (Identifier
// rejected) and then close the Network Connection [MQTT-3.1.3-8]."
func TestConformanceZeroLengthClientIDV311(t *testing.T) {
	b := startBridge(t, testConfig(""))
	connect := func(clean bool) error {
		o := pahov3.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID("").SetCleanSession(clean).
			SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
		c := pahov3.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(10 * time.Second) {
			t.Fatal("no CONNACK")
		}
		if tok.Error() == nil && clean {
			// The session works under its assigned id (SUBACK: no Kafka involved).
			if tok := c.Subscribe("conf/zero", 1, nil); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe with an assigned id: %v", tok.Error())
			}
		}
		if tok.Error() == nil {
			c.Disconnect(100)
		}
		return tok.Error()
	}
	if err := connect(true); err != nil {
		t.Fatalf("zero-length client id with CleanSession 1: %v, want accepted", err)
	}
	err := connect(false)
	if !errors.Is(err, pahopackets.ErrorRefusedIDRejected) {
		t.Fatalf("zero-length client id with CleanSession 0: %v, want CONNACK 0x02 identifier rejected", err)
	}
}

// TestConformanceWillV311: MQTT 3.1.1 3.1.2.5. "If the Will Flag is set to
// 1 this indicates that, if the Connect request is accepted, a Will Message
// MUST be stored on the Server and associated with the Network Connection.
// The Will Message MUST be published when the Network Connection is
// subsequently closed unless the Will Message has been deleted by the
// Server on receipt of a DISCONNECT Packet" [MQTT-3.1.2-8].
func TestConformanceWillV311(t *testing.T) {
	b := startBridge(t, testConfig(""))
	topic := "conf/will3/" + randHex(4)
	got := make(chan string, 4)
	sub := connectPaho(t, b.MQTTAddr(), "will3-sub-"+randHex(3))
	if tok := sub.Subscribe(topic, 1, func(_ pahov3.Client, m pahov3.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	clean := connectPaho(t, b.MQTTAddr(), "will3-clean-"+randHex(3), func(o *pahov3.ClientOptions) { o.SetWill(topic, "clean", 1, false) })
	clean.Disconnect(100)
	dropWithWill(t, b.MQTTAddr(), "will3-drop-"+randHex(3), topic, "dropped", false)
	select {
	case p := <-got:
		if p != "dropped" {
			t.Fatalf("first Will: %q, want \"dropped\" (DISCONNECT deletes the Will)", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Will after the connection dropped")
	}
}

// TestWillReachesKafka: a Will message is a publish like any other for the
// bridge (MQTT 5 3.1.2.5: the server publishes it when the connection ends
// without DISCONNECT): it lands in Kafka with its topic, QoS and retain
// headers, not only at local subscribers. mochi publishes Wills without
// OnPublish, so without OnWillSent this test finds nothing in Kafka.
func TestWillReachesKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	b := startBridge(t, testConfig(brokers))
	topic := uniqueTopic("will")
	dropWithWill(t, b.MQTTAddr(), "will-kafka-"+randHex(3), topic, "gone", true)
	msgs := readTopic(t, strings.Split(brokers, ","), kafkaName(t, topic), 1, 20*time.Second)
	if got := string(msgs[0].Value); got != "gone" {
		t.Fatalf("Kafka record value %q, want the Will payload \"gone\"", got)
	}
	for key, want := range map[string]string{"mqtt.topic": topic, "mqtt.qos": "1", "mqtt.retain": "true"} {
		if got, _ := header(msgs[0], key); got != want {
			t.Errorf("header %s = %q, want %q", key, got, want)
		}
	}
}

// TestConformanceResendOrder: MQTT 5 4.6 Message ordering. "When the Server
// re-sends any PUBLISH packets, it MUST re-send them in the order in which
// the original PUBLISH packets were sent" [MQTT-4.6.0-1]. mochi resends a
// resumed session's in-flight messages sorted by their Created second
// (inflight.go GetAll), random within a second; Ferry's inflight-order hook
// (reverse/order.go) renumbers them so the resend keeps delivery order.
func TestConformanceResendOrder(t *testing.T) {
	for i := 0; i < 3; i++ { // one ordering by chance is 1 in 6: three runs make a pass by luck 1 in 216
		_, resumed := offlineQueue(t, testConfig(""))
		var order []string
		for _, p := range resumed {
			order = append(order, string(p.Payload))
		}
		if strings.Join(order, ",") != "unacked,q1,q2" {
			t.Fatalf("run %d: resent in the order %v, want [unacked q1 q2]", i, order)
		}
	}
}

// dropWithWill connects a 3.1.1 client with a QoS 1 Will and closes its
// socket without DISCONNECT (paho always sends one), so the server must
// publish the Will.
func dropWithWill(t *testing.T, addr, id, topic, payload string, retain bool) {
	t.Helper()
	o := pahov3.NewClientOptions().AddBroker("tcp://"+addr).SetClientID(id).
		SetWill(topic, payload, 1, retain).SetAutoReconnect(false).SetKeepAlive(2 * time.Second).
		SetPingTimeout(time.Hour)
	var conn net.Conn
	o.SetCustomOpenConnectionFn(func(uri *url.URL, _ pahov3.ClientOptions) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", uri.Host, 5*time.Second)
		conn = c
		return c, err
	})
	c := pahov3.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	conn.Close()
}
