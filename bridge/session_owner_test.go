package bridge

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pahov5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// tryConnect connects an MQTT 3.1.1 client as user and returns its CONNACK
// return code and Session Present (the client is disconnected when the
// test ends); opts may set a message handler.
func tryConnect(t *testing.T, addr, id, user, pass string, clean bool, opts ...func(*paho.ClientOptions)) (byte, bool, paho.Client) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetUsername(user).SetPassword(pass).
		SetCleanSession(clean).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).
		SetProtocolVersion(4) // no fallback to 3.1 after a refusal
	for _, f := range opts {
		f(o)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		t.Fatalf("%s connect %s: no CONNACK", user, id)
	}
	t.Cleanup(func() { c.Disconnect(100) })
	ct := tok.(*paho.ConnectToken)
	return ct.ReturnCode(), ct.SessionPresent(), c
}

// msgs collects what a client receives.
type msgs struct {
	mu  sync.Mutex
	got []string
}

func (m *msgs) handler(_ paho.Client, msg paho.Message) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, string(msg.Payload()))
}

func (m *msgs) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

// TestSessionOwner (issue 50): with users configured, a session belongs to
// the user who made it (mqtt.session_owner auto). Another user presenting
// its client id, on the owner's instance or another, with clean session 0
// or 1 (MQTT 3.1.1: return code 5) or clean start (MQTT 5: 0x87), is
// refused, while the owner is connected (who keeps its connection and its
// deliveries) and while the session is offline; the session's record is
// untouched, and its owner resumes it with Session Present 1 and the
// messages queued meanwhile. Counted in ferry_sessions_denied_total.
func TestSessionOwner(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ca, cb := testConfig(brokers), testConfig(brokers)
	cb.State.SessionsTopic, cb.State.RetainedTopic = ca.State.SessionsTopic, ca.State.RetainedTopic
	users := []User{{Username: "alice", Password: "a"}, {Username: "mallory", Password: "m"}, {Username: "pub", Password: "p"}}
	ca.MQTT.Users, cb.MQTT.Users = users, users
	a, b := startBridge(t, ca), startBridge(t, cb)
	id, root := "owned-"+randHex(4), "ferrytest/owner"+randHex(4)
	pub := connectPaho(t, a.MQTTAddr(), "pub-"+randHex(4), as("pub", "p"))

	var live msgs
	code, _, alice := tryConnect(t, a.MQTTAddr(), id, "alice", "a", false, func(o *paho.ClientOptions) {
		o.SetDefaultPublishHandler(live.handler)
	})
	if code != 0 {
		t.Fatalf("alice: CONNACK %d", code)
	}
	if tok := alice.Subscribe(root+"/#", 1, live.handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	waitFor(t, 10*time.Second, "b reads alice's session", func() bool {
		s := b.stateEngine.Lookup(id)
		return s != nil && s.Connected && len(s.Subs) == 1
	})

	// Connected: refused on her instance and on the other.
	for _, at := range []struct {
		name string
		b    *Bridge
	}{{"a", a}, {"b", b}} {
		for _, clean := range []bool{false, true} {
			if code, _, _ := tryConnect(t, at.b.MQTTAddr(), id, "mallory", "m", clean); code != 5 {
				t.Errorf("mallory with alice's client id on %s (clean %v, alice connected): CONNACK %d, want 5", at.name, clean, code)
			}
		}
	}
	_, ack := dialV5(t, b.MQTTAddr(), pahov5.ClientConfig{ClientID: id}, &pahov5.Connect{ClientID: id, CleanStart: true,
		KeepAlive: 30, UsernameFlag: true, Username: "mallory", PasswordFlag: true, Password: []byte("m")})
	if ack.ReasonCode != 0x87 {
		t.Errorf("MQTT 5 mallory with alice's client id (clean start, alice connected): CONNACK 0x%02x, want 0x87", ack.ReasonCode)
	}
	publishQoS1(t, pub, root+"/live", "live", false)
	waitFor(t, 10*time.Second, "alice, still connected, gets a message", func() bool { return slices.Contains(live.all(), "live") })
	if !alice.IsConnectionOpen() {
		t.Fatal("alice's connection was taken")
	}
	waitAcked(t, a, id)
	alice.Disconnect(100)
	waitFor(t, 10*time.Second, "alice's session offline on a and b", func() bool {
		return sessionOffline(a, id) && sessionOffline(b, id)
	})
	for i := range 3 {
		publishQoS1(t, pub, root+"/q", string(rune('0'+i)), false)
	}
	before := readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic)[id]

	// Offline: refused too, the record untouched.
	for _, at := range []*Bridge{a, b} {
		for _, clean := range []bool{false, true} {
			if code, _, _ := tryConnect(t, at.MQTTAddr(), id, "mallory", "m", clean); code != 5 {
				t.Errorf("mallory with alice's client id (clean %v, session offline): CONNACK %d, want 5", clean, code)
			}
		}
	}
	if after := readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic)[id]; !bytes.Equal(after, before) {
		t.Fatalf("alice's session record changed by refused CONNECTs:\nbefore %s\nafter  %s", before, after)
	}
	var back msgs
	code, present, _ := tryConnect(t, b.MQTTAddr(), id, "alice", "a", false, func(o *paho.ClientOptions) {
		o.SetDefaultPublishHandler(back.handler)
	})
	if code != 0 || !present {
		t.Fatalf("alice resuming her session on b: CONNACK %d, Session Present %v; want 0, true", code, present)
	}
	waitFor(t, 15*time.Second, "alice's queue", func() bool { return len(back.all()) >= 3 })
	if got := back.all(); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("alice's queue after the refused CONNECTs: %q, want [0 1 2]", got)
	}
	for _, br := range []*Bridge{a, b} {
		if n := metricValue(t, br, "ferry_sessions_denied_total", map[string]string{"reason": "owner"}); n < 3 {
			t.Errorf(`ferry_sessions_denied_total{reason="owner"} = %v, want >= 3`, n)
		}
	}
}

// TestSessionOwnerOff: mqtt.session_owner off keeps the former behaviour:
// another user resumes the session (Session Present 1).
func TestSessionOwnerOff(t *testing.T) {
	cfg := testConfig(kafkatest.Brokers(t))
	cfg.MQTT.Users = []User{{Username: "alice", Password: "a"}, {Username: "bob", Password: "b"}}
	cfg.MQTT.SessionOwner = "off"
	b := startBridge(t, cfg)
	id := "unbound-" + randHex(4)
	code, _, c := tryConnect(t, b.MQTTAddr(), id, "alice", "a", false)
	if code != 0 {
		t.Fatalf("alice: CONNACK %d", code)
	}
	c.Disconnect(100)
	waitFor(t, 10*time.Second, "alice's session offline", func() bool { return sessionOffline(b, id) })
	if code, present, _ := tryConnect(t, b.MQTTAddr(), id, "bob", "b", false); code != 0 || !present {
		t.Fatalf("bob with alice's client id, session_owner off: CONNACK %d, Session Present %v; want 0, true", code, present)
	}
}

// TestSessionCaps (issue 50): mqtt.max_sessions_per_user 2 and
// mqtt.max_sessions 3: alice's third persistent session is refused (MQTT
// 3.1.1: return code 3 Server unavailable; MQTT 5: 0x97 Quota exceeded),
// her existing ones resume, her clean sessions connect; bob's second
// session is the fourth in total and is refused. Counted.
func TestSessionCaps(t *testing.T) {
	cfg := testConfig(kafkatest.Brokers(t))
	cfg.MQTT.Users = []User{{Username: "alice", Password: "a"}, {Username: "bob", Password: "b"}}
	cfg.MQTT.MaxSessions, cfg.MQTT.MaxSessionsPerUser = 3, 2
	b := startBridge(t, cfg)
	tag := randHex(4)
	persistent := func(id, user string) byte {
		code, _, c := tryConnect(t, b.MQTTAddr(), id+tag, user, user[:1], false)
		if code == 0 {
			c.Disconnect(100)
			waitFor(t, 10*time.Second, id+" offline", func() bool { return sessionOffline(b, id+tag) })
		}
		return code
	}
	for _, id := range []string{"a1", "a2"} {
		if code := persistent(id, "alice"); code != 0 {
			t.Fatalf("alice's session %s: CONNACK %d, want 0", id, code)
		}
	}
	if code := persistent("a3", "alice"); code != 3 {
		t.Errorf("alice's third persistent session (max_sessions_per_user 2): CONNACK %d, want 3", code)
	}
	_, ack := dialV5(t, b.MQTTAddr(), pahov5.ClientConfig{ClientID: "a4" + tag}, &pahov5.Connect{ClientID: "a4" + tag,
		CleanStart: true, KeepAlive: 30, UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("a"),
		Properties: &pahov5.ConnectProperties{SessionExpiryInterval: ptr[uint32](60)}})
	if ack.ReasonCode != 0x97 {
		t.Errorf("alice's third persistent session, MQTT 5: CONNACK 0x%02x, want 0x97", ack.ReasonCode)
	}
	if code, present, _ := tryConnect(t, b.MQTTAddr(), "a1"+tag, "alice", "a", false); code != 0 || !present {
		t.Errorf("alice resuming a1 at her cap: CONNACK %d, Session Present %v; want 0, true", code, present)
	}
	if code, _, _ := tryConnect(t, b.MQTTAddr(), "a5"+tag, "alice", "a", true); code != 0 {
		t.Errorf("alice's clean session at her cap: CONNACK %d, want 0", code)
	}
	if code := persistent("b1", "bob"); code != 0 {
		t.Fatalf("bob's first session (third in total): CONNACK %d, want 0", code)
	}
	if code := persistent("b2", "bob"); code != 3 {
		t.Errorf("bob's second session, the fourth in total (max_sessions 3): CONNACK %d, want 3", code)
	}
	if n := metricValue(t, b, "ferry_sessions_denied_total", map[string]string{"reason": "quota"}); n != 3 {
		t.Errorf(`ferry_sessions_denied_total{reason="quota"} = %v, want 3`, n)
	}
}

// TestSessionPolicyConfig: mqtt.session_owner (auto: on with users),
// mqtt.max_sessions and mqtt.max_sessions_per_user (per user only with
// users) load from the file and the environment; Validate names a bad one.
func TestSessionPolicyConfig(t *testing.T) {
	def := DefaultConfig().MQTT
	if def.SessionOwner != "auto" || def.MaxSessions != 1000000 || def.MaxSessionsPerUser != 10000 {
		t.Fatalf("defaults: session_owner %q, max_sessions %d, max_sessions_per_user %d", def.SessionOwner, def.MaxSessions,
			def.MaxSessionsPerUser)
	}
	if def.sessionOwner() || def.maxSessionsPerUser() != 0 {
		t.Error("auto without users: sessions bound, or a per-user cap")
	}
	def.Users = []User{{Username: "u", Password: "p"}}
	if !def.sessionOwner() || def.maxSessionsPerUser() != 10000 {
		t.Error("auto with users: sessions not bound, or no per-user cap")
	}
	cfg, err := loadWith(t, "mqtt:\n  session_owner: \"off\"\n  max_sessions: 5\n  max_sessions_per_user: 0\n")
	if err != nil || cfg.MQTT.SessionOwner != "off" || cfg.MQTT.MaxSessions != 5 || cfg.MQTT.MaxSessionsPerUser != 0 {
		t.Errorf("from the file: %q %d %d, %v", cfg.MQTT.SessionOwner, cfg.MQTT.MaxSessions, cfg.MQTT.MaxSessionsPerUser, err)
	}
	t.Setenv("FERRY_MQTT_SESSION_OWNER", "on")
	t.Setenv("FERRY_MQTT_MAX_SESSIONS_PER_USER", "7")
	if cfg, err := loadWith(t, ""); err != nil || !cfg.MQTT.sessionOwner() || cfg.MQTT.MaxSessionsPerUser != 7 {
		t.Errorf("from the environment: %q %d, %v", cfg.MQTT.SessionOwner, cfg.MQTT.MaxSessionsPerUser, err)
	}
	for _, tt := range []struct {
		set        func(*Config)
		key, value string
	}{
		{func(c *Config) { c.MQTT.SessionOwner = "yes" }, "mqtt.session_owner", "yes"},
		{func(c *Config) { c.MQTT.MaxSessions = -1 }, "mqtt.max_sessions", "-1"},
		{func(c *Config) { c.MQTT.MaxSessionsPerUser = -2 }, "mqtt.max_sessions_per_user", "-2"},
	} {
		c := testConfig("")
		tt.set(&c)
		var fe *FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Key != tt.key || !strings.Contains(err.Error(), tt.value) {
			t.Errorf("Validate() = %v, want a *FieldError for %s=%s", err, tt.key, tt.value)
		}
	}
}
