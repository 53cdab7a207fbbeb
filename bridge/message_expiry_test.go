package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/state"
)

// sharedState gives a and b the same state topics.
func sharedState(a, b *Config) {
	b.State.SessionsTopic, b.State.RetainedTopic = a.State.SessionsTopic, a.State.RetainedTopic
}

// TestRetainedWithoutExpiryOutlivesADay (issue 50 part 3): MQTT 5
// 3.3.2.3.3, an absent Message Expiry Interval means the message does not
// expire; MQTT 3.1.1 has no expiry. Retained messages (3.1.1, and MQTT 5
// with no interval) are rewritten in the retained table as Ferry wrote them
// a day and an hour earlier: created 25 h ago, expiry created + 86,400
// (mochi's maximum, applied as a default). A new instance serves them, and
// so does the running one that read the rewrite (its broker's sweep sees
// them 25 h old); neither adds a Message Expiry Interval. A message that
// asked an hour, received 25 h ago, is served by neither.
func TestRetainedWithoutExpiryOutlivesADay(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ca, cb := testConfig(brokers), testConfig(brokers)
	sharedState(&ca, &cb)
	a := startBridge(t, ca)
	base := "day/" + randHex(4)
	v3 := connectPaho(t, a.MQTTAddr(), "day-v3-"+randHex(3))
	if tok := v3.Publish(base+"/v3", 1, true, "v3"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	v5 := connectV5(t, a.MQTTAddr(), "day-v5-"+randHex(3))
	mustPublish(t, v5, &paho.Publish{Topic: base + "/v5", QoS: 1, Retain: true, Payload: []byte("v5")})
	mustPublish(t, v5, &paho.Publish{Topic: base + "/hour", QoS: 1, Retain: true, Payload: []byte("hour"),
		Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](3600)}})

	// The records as Ferry wrote them 25 h ago.
	table := readTable(t, ca.Kafka.Brokers, ca.State.RetainedTopic)
	var recs []*kgo.Record
	for _, name := range []string{"v3", "v5", "hour"} {
		topic := base + "/" + name
		var rv session.RetainedValue
		if err := json.Unmarshal(table[topic], &rv); err != nil {
			t.Fatalf("retained record of %s: %v", topic, err)
		}
		rv.Msg.Created -= 25 * 3600
		if name == "hour" {
			rv.Expiry = rv.Msg.Created + 3600
		} else {
			rv.Expiry = rv.Msg.Created + 86400 // mochi's default maximum, asked or not
		}
		v, err := json.Marshal(&rv)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: ca.State.RetainedTopic, Key: []byte(topic), Value: v})
	}
	produceAll(t, kgoProducer(t, brokers), recs)
	waitFor(t, 10*time.Second, "the running instance to read the rewritten records", func() bool {
		pk, ok := a.server.Topics.Retained.Get(base + "/v5")
		return !ok || pk.Created < time.Now().Unix()-24*3600
	})
	b := startBridge(t, cb)
	// A sentinel that asked 1 s: once it has left both brokers' indexes,
	// their once-a-second sweeps ran after the old records were read.
	mustPublish(t, v5, &paho.Publish{Topic: base + "/sentinel", QoS: 1, Retain: true, Payload: []byte("s"),
		Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](1)}})
	waitFor(t, 5*time.Second, "both instances to get the sentinel", func() bool {
		_, onA := a.server.Topics.Retained.Get(base + "/sentinel")
		_, onB := b.server.Topics.Retained.Get(base + "/sentinel")
		return onA && onB
	})
	waitFor(t, 10*time.Second, "both instances' sweeps to remove the sentinel", func() bool {
		_, onA := a.server.Topics.Retained.Get(base + "/sentinel")
		_, onB := b.server.Topics.Retained.Get(base + "/sentinel")
		return !onA && !onB
	})
	for _, inst := range []struct {
		name string
		b    *Bridge
	}{{"new instance", b}, {"running instance", a}} {
		for _, name := range []string{"v3", "v5"} {
			if _, ok := inst.b.server.Topics.Retained.Get(base + "/" + name); !ok {
				t.Errorf("%s: the %s retained message (no expiry asked, 25 h old) left the broker's index", inst.name, name)
			}
		}
		if _, ok := inst.b.server.Topics.Retained.Get(base + "/hour"); ok {
			t.Errorf("%s: the retained message that asked an hour, 25 h ago, is in the broker's index", inst.name)
		}
		in := newInbox()
		sub, _ := dialV5(t, inst.b.MQTTAddr(), paho.ClientConfig{ClientID: "day-sub-" + randHex(3), OnPublishReceived: in.handler()},
			&paho.Connect{ClientID: "day-sub-" + randHex(3), KeepAlive: 30, CleanStart: true})
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: base + "/#", QoS: 1}}})
		// The retained messages come before the SUBACK's effect is over;
		// a bounded wait for the two, then what came.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && len(in.all()) < 2 {
			time.Sleep(20 * time.Millisecond)
		}
		got := map[string]*paho.Publish{}
		for _, p := range in.all() {
			got[p.Topic] = p
		}
		for _, name := range []string{"v3", "v5"} {
			p := got[base+"/"+name]
			switch {
			case p == nil:
				t.Errorf("%s: the %s retained message (no expiry asked, 25 h old) was not served", inst.name, name)
			case p.Properties != nil && p.Properties.MessageExpiry != nil:
				t.Errorf("%s: the %s retained message came with Message Expiry Interval %d, none asked", inst.name, name, *p.Properties.MessageExpiry)
			}
		}
		if got[base+"/hour"] != nil || got[base+"/sentinel"] != nil {
			t.Errorf("%s: an expired retained message was served: %v", inst.name, slices.Collect(maps.Keys(got)))
		}
	}
}

// TestInflightDeliveryOutlivesADay (issue 50 part 3): a persistent MQTT
// 3.1.1 session on a holds two reverse deliveries unacknowledged. The
// broker's in-flight sweep runs with its clock a day and an hour ahead
// (mochi has no clock seam: the test calls the sweep mochi runs every
// second, ClearExpiredInflights, with that time): "m1", which asked no
// expiry, stays in flight; "m2", made to have asked one that has passed by
// then, is dropped. Neither is an acknowledgement: the client resumes on b
// and gets both (mochi's default maximum, a day, dropped both and the
// session engine took each drop for a PUBACK, so the resume got neither).
func TestInflightDeliveryOutlivesADay(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "day")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	ca, cb := reverseConfig(brokers, k), reverseConfig(brokers, k)
	sharedState(&ca, &cb)
	a, b := startBridge(t, ca), startBridge(t, cb)
	id := "day-inflight-" + randHex(3)
	got := make(chan string, 10)
	sub := connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) {
		o.SetCleanSession(false).SetAutoAckDisabled(true).
			SetDefaultPublishHandler(func(_ pahov3.Client, msg pahov3.Message) { got <- string(msg.Payload()) })
	})
	if tok := sub.Subscribe(m, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{{Topic: k, Value: []byte("m1")}, {Topic: k, Value: []byte("m2")}})
	waitAll(t, got, "delivered live on a, not acknowledged", "m1", "m2")
	cl, ok := a.server.Clients.Get(id)
	if !ok {
		t.Fatal("no client on a")
	}
	var m2 uint16
	waitFor(t, 5*time.Second, "both deliveries in flight on a", func() bool {
		m2 = 0
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if string(pk.Payload) == "m2" {
				m2 = pk.PacketID
			}
		}
		return cl.State.Inflight.Len() == 2 && m2 != 0
	})
	later := time.Now().Unix() + 25*3600
	pk, _ := cl.State.Inflight.Get(m2)
	pk.ProtocolVersion, pk.Expiry = 5, later-1 // as if its publisher had asked an expiry, passed by then
	cl.State.Inflight.Set(pk)
	dropped := cl.ClearExpiredInflights(later, a.server.Options.Capabilities.MaximumMessageExpiryInterval)
	if len(dropped) != 1 || dropped[0] != m2 {
		t.Errorf("the sweep a day and an hour ahead dropped %v, want only m2's id %d (m1 asked no expiry)", dropped, m2)
	}
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "session offline", func() bool { return sessionOffline(a, id) })
	got2 := make(chan string, 10)
	connectPaho(t, b.MQTTAddr(), id, persistentInto(got2))
	waitAll(t, got2, "unacknowledged deliveries, one dropped from flight, after a resume on b", "m1", "m2")
}

// TestMessageExpiryAsAsked (issue 53 item 1): MQTT 5 3.3.2.3.3 through
// the bridge: a message published without a Message Expiry Interval is
// delivered without one (it was 86400, mochi's maximum as a default), one
// published with 10 is delivered with what is left of it; with
// mqtt.max_message_expiry 5s, one asking 10 gets at most 5 and one asking
// none still none.
func TestMessageExpiryAsAsked(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	capped := testConfig(brokers)
	capped.MQTT.MaxMessageExpiry = 5 * time.Second
	for _, c := range []struct {
		name string
		cfg  Config
		want uint32
	}{{"no cap", testConfig(brokers), 10}, {"cap 5s", capped, 5}} {
		t.Run(c.name, func(t *testing.T) {
			b := startBridge(t, c.cfg)
			topic := "exp/" + randHex(4)
			in := newInbox()
			sub, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: "exp-sub-" + randHex(3), OnPublishReceived: in.handler()},
				&paho.Connect{ClientID: "exp-sub-" + randHex(3), KeepAlive: 30, CleanStart: true})
			mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic + "/#", QoS: 1}}})
			pub := connectV5(t, b.MQTTAddr(), "exp-pub-"+randHex(3))
			for _, qos := range []byte{0, 1} {
				mustPublish(t, pub, &paho.Publish{Topic: topic + "/none", QoS: qos, Payload: []byte("n")})
				mustPublish(t, pub, &paho.Publish{Topic: topic + "/ten", QoS: qos, Payload: []byte("t"),
					Properties: &paho.PublishProperties{MessageExpiry: ptr[uint32](10)}})
			}
			for _, p := range in.wait(t, 4, 10*time.Second) {
				var e *uint32
				if p.Properties != nil {
					e = p.Properties.MessageExpiry
				}
				switch {
				case p.Topic == topic+"/none" && e != nil:
					t.Errorf("QoS %d, no expiry asked: delivered with Message Expiry Interval %d", p.QoS, *e)
				case p.Topic == topic+"/ten" && (e == nil || *e > c.want || *e < c.want-1):
					t.Errorf("QoS %d, 10 s asked: delivered with Message Expiry Interval %v, want %d", p.QoS, deref(e), c.want)
				}
			}
		})
	}
}

// TestWillPropertiesKept (issue 53 item 2): MQTT 5 3.1.3.2, a Will is
// published with its Will Properties: Message Expiry Interval 10 (sent as
// 86400), Payload Format Indicator, Content Type, Response Topic and
// Correlation Data (dropped) and User Properties. A local Will (the client's
// connection drops), and a survivor's publish of a dead instance's client's
// Will as the session record stores it.
func TestWillPropertiesKept(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	base := "wp/" + randHex(4)
	in := newInbox()
	sub, _ := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: "wp-sub-" + randHex(3), OnPublishReceived: in.handler()},
		&paho.Connect{ClientID: "wp-sub-" + randHex(3), KeepAlive: 30, CleanStart: true})
	mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: base + "/#", QoS: 1}}})
	props := packets.Properties{MessageExpiryInterval: 10, PayloadFormat: 1, PayloadFormatFlag: true, ContentType: "text/plain",
		ResponseTopic: base + "/reply", CorrelationData: []byte("corr"), User: []packets.UserProperty{{Key: "k", Val: "v"}}}

	check := func(what string, p *paho.Publish) {
		t.Helper()
		pp := p.Properties
		if pp == nil {
			t.Fatalf("%s: the Will arrived without properties", what)
		}
		if e := pp.MessageExpiry; e == nil || *e > 10 || *e < 9 {
			t.Errorf("%s: Will Message Expiry Interval 10, delivered with %v", what, deref(e))
		}
		if pp.PayloadFormat == nil || *pp.PayloadFormat != 1 || pp.ContentType != "text/plain" || pp.ResponseTopic != base+"/reply" ||
			string(pp.CorrelationData) != "corr" || pp.User.Get("k") != "v" {
			t.Errorf("%s: Will properties delivered: payload format %v, content type %q, response topic %q, correlation data %q, user %v",
				what, deref(pp.PayloadFormat), pp.ContentType, pp.ResponseTopic, pp.CorrelationData, pp.User)
		}
	}

	// A local Will: raw CONNECT (paho.golang packs Will Properties as a
	// CONNECT's and drops these), then the connection drops.
	conn := rawConn(t, b.MQTTAddr())
	id := "wp-" + randHex(3)
	cp := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Mods:       packets.Mods{AllowResponseInfo: true},
		Properties: packets.Properties{SessionExpiryInterval: 60, SessionExpiryIntervalFlag: true},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id,
			WillFlag: true, WillTopic: base + "/local", WillPayload: []byte("gone"), WillQos: 1, WillProperties: props}}
	writeConnect(t, conn, cp)
	// The Will as the session record keeps it, for a survivor to publish
	// if this instance died.
	var stored mqtt.Will
	waitFor(t, 10*time.Second, "the session record with the Will", func() bool {
		v := readTable(t, b.cfg.Kafka.Brokers, b.cfg.State.SessionsTopic)[id]
		rec, err := state.DecodeSession(v)
		return v != nil && err == nil && len(rec.Will) > 0 && json.Unmarshal(rec.Will, &stored) == nil
	})
	_ = conn.Close()
	check("local Will", in.wait(t, 1, 10*time.Second)[0])

	// A survivor's publish of that stored Will (what session/wills.go
	// hands the bridge once it fenced the dead owner's session).
	stored.TopicName = base + "/survivor"
	back := stored
	b.hook.publishWill("wp-dead-"+randHex(3), 5, back)
	check("survivor's Will", in.wait(t, 2, 10*time.Second)[1])
}

// writeConnect sends cp on conn and waits for a CONNACK with reason 0.
func writeConnect(t *testing.T, conn net.Conn, cp packets.Packet) {
	t.Helper()
	var buf bytes.Buffer
	if err := cp.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4) // fixed header, length, flags, reason code
	if _, err := io.ReadFull(conn, ack); err != nil || ack[0]>>4 != packets.Connack || ack[3] != 0 {
		t.Fatalf("CONNACK: % x, %v", ack, err)
	}
	_ = conn.SetDeadline(time.Time{})
}

// TestMaxMessageExpiryConfig: mqtt.max_message_expiry defaults to 0 (no
// cap), is read from the file and the environment, and Validate refuses
// what MQTT's four-byte interval cannot say.
func TestMaxMessageExpiryConfig(t *testing.T) {
	if d := DefaultConfig().MQTT.MaxMessageExpiry; d != 0 {
		t.Errorf("default mqtt.max_message_expiry = %s, want 0s", d)
	}
	cfg, err := loadWith(t, "mqtt:\n  max_message_expiry: 90s\n")
	if err != nil || cfg.MQTT.MaxMessageExpiry != 90*time.Second {
		t.Errorf("mqtt.max_message_expiry: 90s in the file: %s, %v", cfg.MQTT.MaxMessageExpiry, err)
	}
	t.Setenv("FERRY_MQTT_MAX_MESSAGE_EXPIRY", "10m")
	if cfg, err := loadWith(t, ""); err != nil || cfg.MQTT.MaxMessageExpiry != 10*time.Minute {
		t.Errorf("FERRY_MQTT_MAX_MESSAGE_EXPIRY=10m: %s, %v", cfg.MQTT.MaxMessageExpiry, err)
	}
	for _, v := range []time.Duration{-time.Second, 1500 * time.Millisecond, (math.MaxUint32 + 1) * time.Second} {
		cfg := testConfig("")
		cfg.MQTT.MaxMessageExpiry = v
		var fe *FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Key != "mqtt.max_message_expiry" || !strings.Contains(err.Error(), v.String()) {
			t.Errorf("Validate() with mqtt.max_message_expiry=%s: %v, want a *FieldError naming it", v, err)
		}
	}
}
