package bridge

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/state"
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
		if m.payload == "q0" {
			// Another instance reads the topic from up to 2.5 s before it
			// first sees the resumed subscription (reading on demand,
			// docs/sessions.md), and would deliver q0 live: resume later.
			if late := time.Now().Add(3100 * time.Millisecond); late.After(expired) {
				expired = late
			}
		}
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

// TestMaxSessionExpiryConfig: mqtt.max_session_expiry defaults to 2h, is
// read from the file and the environment, and Validate refuses what MQTT's
// four-byte interval cannot say.
func TestMaxSessionExpiryConfig(t *testing.T) {
	if d := DefaultConfig().MQTT.MaxSessionExpiry; d != 2*time.Hour {
		t.Errorf("default mqtt.max_session_expiry = %s, want 2h", d)
	}
	cfg, err := loadWith(t, "mqtt:\n  max_session_expiry: 90s\n")
	if err != nil || cfg.MQTT.MaxSessionExpiry != 90*time.Second {
		t.Errorf("mqtt.max_session_expiry: 90s in the file: %s, %v", cfg.MQTT.MaxSessionExpiry, err)
	}
	t.Setenv("FERRY_MQTT_MAX_SESSION_EXPIRY", "10m")
	if cfg, err := loadWith(t, ""); err != nil || cfg.MQTT.MaxSessionExpiry != 10*time.Minute {
		t.Errorf("FERRY_MQTT_MAX_SESSION_EXPIRY=10m: %s, %v", cfg.MQTT.MaxSessionExpiry, err)
	}
	for _, tt := range []struct {
		name  string
		value time.Duration
		ok    bool
	}{
		{"zero (no limit)", 0, true},
		{"largest", math.MaxUint32 * time.Second, true},
		{"negative", -time.Second, false},
		{"fractional", 1500 * time.Millisecond, false},
		{"above MQTT's four bytes", (math.MaxUint32 + 1) * time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("")
			cfg.MQTT.MaxSessionExpiry = tt.value
			err := cfg.Validate()
			var fe *FieldError
			switch {
			case tt.ok && err != nil:
				t.Fatalf("Validate() with mqtt.max_session_expiry=%s: %v, want valid", tt.value, err)
			case !tt.ok && (!errors.As(err, &fe) || fe.Key != "mqtt.max_session_expiry" || !strings.Contains(err.Error(), tt.value.String())):
				t.Fatalf("Validate() = %v, want a *FieldError for mqtt.max_session_expiry=%s", err, tt.value)
			}
		})
	}
}

// TestMaxSessionExpiryCapsExpiry: MQTT 5 3.2.2.3.2 Session Expiry Interval
// (CONNACK): the Server uses it to tell the Client that it uses another
// value than the one of the CONNECT; absent, the CONNECT's applies. With
// mqtt.max_session_expiry 60s an MQTT 5 client asking for 99999 s is told
// 60 in CONNACK, one asking for 30 s is told nothing; the records written
// before the CONNACK say 60 and 30, and an MQTT 3.1.1 persistent session's
// says 60 (it used to be mochi's maximum, 2^32-1 s: it never ended).
func TestMaxSessionExpiryCapsExpiry(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, _ Config) {
		ca.MQTT.MaxSessionExpiry = time.Minute
		a := startBridge(t, ca)
		for _, c := range []struct {
			ask, want uint32
			told      bool
		}{{99999, 60, true}, {30, 30, false}} {
			id := "capexp-" + randHex(4)
			_, ack := dialV5(t, a.MQTTAddr(), paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
				Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(c.ask)}})
			var told *uint32
			if ack.Properties != nil {
				told = ack.Properties.SessionExpiryInterval
			}
			if c.told && (told == nil || *told != c.want) || !c.told && told != nil {
				t.Errorf("asked for session expiry %d with mqtt.max_session_expiry 60s: CONNACK Session Expiry Interval %v, want %v (told %v)",
					c.ask, deref(told), c.want, c.told)
			}
			if e := recordExpiry(t, ca, id); e != c.want {
				t.Errorf("asked for session expiry %d: at CONNACK the record's expiry is %v, want %d", c.ask, e, c.want)
			}
		}
		id := "capexp3-" + randHex(4)
		connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
		if e := recordExpiry(t, ca, id); e != uint32(60) {
			t.Errorf("MQTT 3.1.1 persistent session: at CONNACK the record's expiry is %v, want 60", e)
		}
	})
}

// recordExpiry is the expiry of id's record in cfg's sessions topic now,
// or "no record".
func recordExpiry(t testing.TB, cfg Config, id string) any {
	t.Helper()
	rec := sessionIn(t, readTable(t, cfg.Kafka.Brokers, cfg.State.SessionsTopic), id)
	if rec == nil {
		return "no record"
	}
	return rec.Expiry
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestSessionEndsAfterMaxExpiry: with mqtt.max_session_expiry 2s, sessions
// that went more than 2 s ago are over: MQTT 3.1.1 persistent sessions
// reconnecting on their instance or on another one get Session Present 0,
// and so does an MQTT 5 session that asked for 99999 s. An MQTT 5 client
// that asks at DISCONNECT for 99999 s (mochi takes that as it is) has its
// session ended by its owner too: its record is deleted.
func TestSessionEndsAfterMaxExpiry(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		ca.MQTT.MaxSessionExpiry, cb.MQTT.MaxSessionExpiry = 2*time.Second, 2*time.Second
		a, b := startBridge(t, ca), startBridge(t, cb)
		v5 := func(expiry uint32) func(*paho.ClientConfig, *paho.Connect) {
			return func(_ *paho.ClientConfig, cp *paho.Connect) {
				cp.CleanStart = false
				cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr(expiry)}
			}
		}
		here, there, asked, atDisconnect := "here-"+randHex(4), "there-"+randHex(4), "asked-"+randHex(4), "atdisc-"+randHex(4)
		for _, id := range []string{here, there} {
			c := connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
			if tok := c.Subscribe("exp/"+id, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			c.Disconnect(100)
		}
		c := connectV5(t, a.MQTTAddr(), asked, v5(99999))
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "exp/" + asked, QoS: 1}}})
		if err := c.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		c = connectV5(t, a.MQTTAddr(), atDisconnect, v5(1))
		mustSubscribe(t, c, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "exp/" + atDisconnect, QoS: 1}}})
		if err := c.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: ptr[uint32](99999)}}); err != nil {
			t.Fatal(err)
		}
		// When the last of them has been gone for longer than 2 s (a's view:
		// a record may be deleted by then).
		var over time.Time
		seen := map[string]bool{}
		waitFor(t, 10*time.Second, "the four disconnect records", func() bool {
			for _, id := range []string{here, there, asked, atDisconnect} {
				rec := a.stateEngine.Lookup(id)
				if seen[id] || rec == nil || rec.Connected {
					continue
				}
				if rec.Expiry != 2 {
					t.Errorf("%s's disconnect record says expiry %d, want 2 (mqtt.max_session_expiry)", id, rec.Expiry)
				}
				seen[id] = true
				if at := time.UnixMilli(rec.Disconnected).Add(2*time.Second + time.Millisecond); at.After(over) {
					over = at
				}
			}
			return len(seen) == 4
		})
		waitFor(t, 10*time.Second, "2 s since the sessions went", func() bool { return time.Now().After(over) })

		if present := resumeV3(t, a.MQTTAddr(), here); present {
			t.Error("MQTT 3.1.1 session resumed on its instance after mqtt.max_session_expiry: Session Present 1, want 0")
		}
		if present := resumeV3(t, b.MQTTAddr(), there); present {
			t.Error("MQTT 3.1.1 session resumed on another instance after mqtt.max_session_expiry: Session Present 1, want 0")
		}
		if _, ack := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: asked}, &paho.Connect{ClientID: asked, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](99999)}}); ack.SessionPresent {
			t.Error("MQTT 5 session that asked for 99999 s resumed after mqtt.max_session_expiry: Session Present 1, want 0")
		}
		waitFor(t, 10*time.Second, "the owner to delete the record of the session that asked for 99999 s at DISCONNECT", func() bool {
			v, ok := readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic)[atDisconnect]
			return ok && v == nil
		})
	})
}

// resumeV3 connects an MQTT 3.1.1 client with clean session 0 and returns
// its CONNACK's Session Present.
func resumeV3(t *testing.T, addr, id string) bool {
	t.Helper()
	c := pahov3.NewClient(pahov3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetCleanSession(false).SetAutoReconnect(false))
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("reconnect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return tok.(*pahov3.ConnectToken).SessionPresent()
}

// TestExpiredSessionOfClosedInstanceDeleted: a persistent MQTT 3.1.1
// session whose instance a is closed (its clients go with it) is deleted
// from the sessions table by instance b once mqtt.max_session_expiry (3s)
// has passed: nothing else would ever end it. A reconnect then gets
// Session Present 0.
func TestExpiredSessionOfClosedInstanceDeleted(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		ca.MQTT.MaxSessionExpiry, cb.MQTT.MaxSessionExpiry = 3*time.Second, 3*time.Second
		a, b := startBridge(t, ca), startBridge(t, cb)
		id := "gone-" + randHex(4)
		c := connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
		if tok := c.Subscribe("gone/"+id, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// a is gone: whatever ends the session now is b.
		var rec *state.Session
		waitFor(t, 10*time.Second, "b to read a's disconnect record", func() bool {
			rec = b.stateEngine.Lookup(id)
			return rec != nil && !rec.Connected
		})
		if rec.Owner != ca.Instance.ID {
			t.Fatalf("after a closed (in %s) b reads the record of owner %s, want a's (%s)", time.Since(start).Round(time.Millisecond), rec.Owner, ca.Instance.ID)
		}
		if rec.Expiry != 3 {
			t.Errorf("a's disconnect record says expiry %d, want 3 (mqtt.max_session_expiry)", rec.Expiry)
		}
		waitFor(t, 20*time.Second, "b to delete the expired session of closed a", func() bool { return b.stateEngine.Lookup(id) == nil })
		if d := time.Since(time.UnixMilli(rec.Disconnected)); d < 3*time.Second {
			t.Fatalf("deleted %s after the client went, before its expiry of 3s", d)
		}
		if v, ok := readTable(t, cb.Kafka.Brokers, cb.State.SessionsTopic)[id]; !ok || v != nil {
			t.Fatalf("b's view has no record, but the sessions topic's last record of the session is %q (present %v), want a tombstone", v, ok)
		}
		if present := resumeV3(t, b.MQTTAddr(), id); present {
			t.Fatal("reconnect after the expired session was deleted: Session Present 1, want 0")
		}
	})
}
