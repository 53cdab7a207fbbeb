package bridge

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	pahov5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestLoadConfigACLKeys: the key names of issue 15 are a contract.
func TestLoadConfigACLKeys(t *testing.T) {
	cfg, err := loadWith(t, `
mqtt:
  max_keepalive: 30s
  anonymous:
    publish: ["pub/#"]
    subscribe: ["sub/#"]
    deny_publish: ["pub/secret"]
    deny_subscribe: ["sub/secret/#"]
  users:
    - username: u
      password: p
      publish: ["a/#"]
      subscribe: ["b/#"]
      deny_publish: ["a/x"]
      deny_subscribe: ["b/x"]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := ACL{Publish: []string{"pub/#"}, Subscribe: []string{"sub/#"}, DenyPublish: []string{"pub/secret"}, DenySubscribe: []string{"sub/secret/#"}}
	if a := cfg.MQTT.Anonymous; !slices.Equal(a.Publish, want.Publish) || !slices.Equal(a.Subscribe, want.Subscribe) ||
		!slices.Equal(a.DenyPublish, want.DenyPublish) || !slices.Equal(a.DenySubscribe, want.DenySubscribe) {
		t.Errorf("mqtt.anonymous = %+v, want %+v", a, want)
	}
	u := cfg.MQTT.Users[0]
	if !slices.Equal(u.Publish, []string{"a/#"}) || !slices.Equal(u.Subscribe, []string{"b/#"}) ||
		!slices.Equal(u.DenyPublish, []string{"a/x"}) || !slices.Equal(u.DenySubscribe, []string{"b/x"}) {
		t.Errorf("mqtt.users[0] = %+v", u)
	}
	if cfg.MQTT.MaxKeepalive != 30*time.Second {
		t.Errorf("mqtt.max_keepalive = %s, want 30s", cfg.MQTT.MaxKeepalive)
	}
	t.Setenv("FERRY_MQTT_MAX_KEEPALIVE", "45s")
	if cfg, err := loadWith(t, ""); err != nil || cfg.MQTT.MaxKeepalive != 45*time.Second {
		t.Errorf("FERRY_MQTT_MAX_KEEPALIVE=45s: %v, %v", cfg.MQTT.MaxKeepalive, err)
	}
}

func TestValidateACLAndKeepalive(t *testing.T) {
	tests := []struct {
		name  string
		set   func(*Config)
		key   string
		value string
	}{
		{"anonymous deny_subscribe", func(c *Config) { c.MQTT.Anonymous.DenySubscribe = []string{"a/#/b"} }, "mqtt.anonymous.deny_subscribe[0]", "a/#/b"},
		{"anonymous publish", func(c *Config) { c.MQTT.Anonymous.Publish = []string{"ok", "x+"} }, "mqtt.anonymous.publish[1]", "x+"},
		{"user deny_publish", func(c *Config) {
			c.MQTT.Users = []User{{Username: "u", Password: "p", ACL: ACL{DenyPublish: []string{""}}}}
		}, "mqtt.users[0].deny_publish[0]", ""},
		{"negative keepalive", func(c *Config) { c.MQTT.MaxKeepalive = -time.Second }, "mqtt.max_keepalive", "-1s"},
		{"fractional keepalive", func(c *Config) { c.MQTT.MaxKeepalive = 1500 * time.Millisecond }, "mqtt.max_keepalive", "1.5s"},
		{"huge keepalive", func(c *Config) { c.MQTT.MaxKeepalive = 65536 * time.Second }, "mqtt.max_keepalive", "18h12m16s"},
		{"zero write timeout", func(c *Config) { c.MQTT.WriteTimeout = 0 }, "mqtt.write_timeout", "0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("")
			tt.set(&cfg)
			err := cfg.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Key != tt.key || !strings.Contains(err.Error(), tt.value) {
				t.Fatalf("Validate() = %v, want a *FieldError for %s=%s", err, tt.key, tt.value)
			}
		})
	}
}

func TestACLAllows(t *testing.T) {
	acl := ACL{
		Publish:       []string{"fleet/#"},
		Subscribe:     []string{"fleet/#", "cmd/+"},
		DenyPublish:   []string{"fleet/admin/#"},
		DenySubscribe: []string{"fleet/secret", "fleet/+/private"},
	}
	tests := []struct {
		topic string
		write bool
		want  bool
	}{
		{"fleet/a", true, true},
		{"fleet/admin", true, false}, // a/# covers a itself
		{"fleet/admin/x", true, false},
		{"other", true, false},
		{"fleet/a", false, true},
		{"fleet/secret", false, false},
		{"fleet/x/private", false, false},
		{"fleet/+/private", false, false}, // covered entirely by a deny filter
		// Wider than a deny filter: granted; the denied topics are withheld
		// per delivery (mochi checks the topic name for every subscriber).
		{"fleet/#", false, true},
		{"fleet/+", false, true},
		{"cmd/x", false, true},
		{"cmd/#", false, false}, // wider than the allow filter cmd/+
		{"$share/g/fleet/secret", false, false},
		{"$share/g/fleet/a", false, true},
		{"$share/g/other", false, false},
	}
	for _, tt := range tests {
		if got := acl.allows(tt.topic, tt.write); got != tt.want {
			t.Errorf("allows(%q, write=%v) = %v, want %v", tt.topic, tt.write, got, tt.want)
		}
	}
	if !(ACL{}).allows("$SYS/x", false) || !(ACL{}).allows("x", true) {
		t.Error("an empty ACL must allow everything")
	}
}

// aclConfig: no users; anonymous clients restricted by mqtt.anonymous.
func aclConfig() Config {
	cfg := testConfig("")
	cfg.MQTT.Anonymous = ACL{
		DenyPublish:   []string{"acl/locked/#"},
		DenySubscribe: []string{"acl/secret", "acl/+/private"},
	}
	return cfg
}

// TestAnonymousACLSubscribeV5: MQTT 5 3.9.3: the SUBACK has one reason code
// per Topic Filter [MQTT-3.9.3-1]; 0x87 Not authorized. Only the denied
// filter is refused; the others of the same SUBSCRIBE are granted, and a
// granted filter wider than a deny filter never delivers a denied topic.
func TestAnonymousACLSubscribeV5(t *testing.T) {
	b := startBridge(t, aclConfig())
	got := make(chan string, 16)
	sub := connectV5(t, b.MQTTAddr(), "acl5-sub-"+randHex(3), func(cc *pahov5.ClientConfig, _ *pahov5.Connect) {
		cc.OnPublishReceived = []func(pahov5.PublishReceived) (bool, error){func(pr pahov5.PublishReceived) (bool, error) {
			got <- pr.Packet.Topic
			return true, nil
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sa, err := sub.Subscribe(ctx, &pahov5.Subscribe{Subscriptions: []pahov5.SubscribeOptions{
		{Topic: "acl/open", QoS: 1},
		{Topic: "acl/secret", QoS: 1},
		{Topic: "acl/+", QoS: 0},
		{Topic: "acl/x/private", QoS: 1},
	}})
	if sa == nil {
		t.Fatalf("subscribe: %v", err)
	}
	if want := []byte{1, 0x87, 0, 0x87}; string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons %#v, want %#v", sa.Reasons, want)
	}
	pub := connectV5(t, b.MQTTAddr(), "acl5-pub-"+randHex(3))
	for _, topic := range []string{"acl/secret", "acl/open"} {
		if _, err := pub.Publish(ctx, &pahov5.Publish{Topic: topic, QoS: 1, Payload: []byte("m")}); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
	}
	// acl/open matches two granted subscriptions (one delivery); acl/secret
	// matches the granted acl/+ but is denied per delivery.
	select {
	case topic := <-got:
		if topic != "acl/open" {
			t.Fatalf("received %q, want only acl/open", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acl/open not delivered")
	}
	// acl/secret was published before acl/open on the same connection and
	// would have been delivered first.
	select {
	case topic := <-got:
		t.Fatalf("received a second message %q", topic)
	default:
	}
}

// TestObscureNotAuthorized: with mqtt.obscure_not_authorized an MQTT 5
// client refused by the ACL reads 0x80 Unspecified error, never 0x87: for a
// SUBSCRIBE filter (SUBACK) and for a QoS 1 and a QoS 2 publish
// (PUBACK/PUBREC). Off by default (TestAnonymousACLSubscribeV5 and
// TestAnonymousACLPublishV5 read 0x87).
func TestObscureNotAuthorized(t *testing.T) {
	if DefaultConfig().MQTT.ObscureNotAuthorized {
		t.Fatal("mqtt.obscure_not_authorized must default to false")
	}
	cfg := aclConfig()
	cfg.MQTT.ObscureNotAuthorized = true
	b := startBridge(t, cfg)
	c := dialLight5(t, b.MQTTAddr(), "obscure-"+randHex(3), true, packets.Properties{})
	c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "acl/open", Qos: 1}, {Filter: "acl/secret", Qos: 1}}})
	if pk, _ := c.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback || string(pk.ReasonCodes) != string([]byte{1, 0x80}) {
		t.Fatalf("SUBACK: type %d reasons %#v, want [1 0x80]", pk.FixedHeader.Type, pk.ReasonCodes)
	}
	for qos, typ := range map[byte]byte{1: packets.Puback, 2: packets.Pubrec} {
		c.send(t, 5, publishPacket("acl/locked/door", qos, uint16(qos+1), "no"))
		pk, _ := c.next(t, 5, 10*time.Second)
		if pk.FixedHeader.Type != typ || pk.ReasonCode != packets.ErrUnspecifiedError.Code {
			t.Fatalf("denied QoS %d publish: type %d reason %#x %q, want type %d reason 0x80",
				qos, pk.FixedHeader.Type, pk.ReasonCode, pk.Properties.ReasonString, typ)
		}
	}
}

// TestAnonymousACLPublishV5: MQTT 5 3.4.2.1: PUBACK reason 0x87 Not
// authorized for a denied QoS 1 publish; it is not bridged.
func TestAnonymousACLPublishV5(t *testing.T) {
	b := startBridge(t, aclConfig())
	c := connectV5(t, b.MQTTAddr(), "acl5-p-"+randHex(3))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pr, _ := c.Publish(ctx, &pahov5.Publish{Topic: "acl/locked/door", QoS: 1, Payload: []byte("no")})
	if pr == nil || pr.ReasonCode != 0x87 {
		t.Fatalf("denied publish: PUBACK %+v, want reason 0x87", pr)
	}
	pr, err := c.Publish(ctx, &pahov5.Publish{Topic: "acl/open", QoS: 1, Payload: []byte("yes")})
	if err != nil || pr == nil || pr.ReasonCode != 0 {
		t.Fatalf("allowed publish: %v %+v", err, pr)
	}
	if got := counterValue(t, b.reg, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "1"}); got != 1 {
		t.Fatalf("publishes bridged = %v, want 1 (the denied one is not)", got)
	}
}

// TestAnonymousACLV3: MQTT 3.1.1 3.9.3: SUBACK return code 0x80 Failure for
// the denied filter only. A denied QoS 1 PUBLISH: 3.1.1 has no negative
// PUBACK; mochi disconnects the client (server.go processPublish:
// DisconnectClient(ErrNotAuthorized)), a denied QoS 0 one is dropped.
func TestAnonymousACLV3(t *testing.T) {
	b := startBridge(t, aclConfig())
	c := connectPaho(t, b.MQTTAddr(), "acl3-"+randHex(3))
	tok := c.SubscribeMultiple(map[string]byte{"acl/open": 1, "acl/secret": 1, "acl/y/private": 0, "acl/z": 2}, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	res := tok.(*paho.SubscribeToken).Result()
	want := map[string]byte{"acl/open": 1, "acl/secret": 0x80, "acl/y/private": 0x80, "acl/z": 2}
	for f, code := range want {
		if res[f] != code {
			t.Errorf("SUBACK for %s = %#x, want %#x (all: %v)", f, res[f], code, res)
		}
	}

	lost := make(chan struct{})
	p := connectPaho(t, b.MQTTAddr(), "acl3-p-"+randHex(3), func(o *paho.ClientOptions) {
		o.SetConnectionLostHandler(func(paho.Client, error) { close(lost) })
	})
	p.Publish("acl/locked/a", 1, false, "no")
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("3.1.1 client not disconnected after a denied QoS 1 publish")
	}
}

// TestUserDenyACL: deny lists in a user entry win over its allow lists.
func TestUserDenyACL(t *testing.T) {
	cfg := testConfig("")
	cfg.MQTT.Users = []User{{Username: "u", Password: "p", ACL: ACL{
		Publish: []string{"u/#"}, Subscribe: []string{"u/#"},
		DenyPublish: []string{"u/ro/#"}, DenySubscribe: []string{"u/wo/#"},
	}}}
	b := startBridge(t, cfg)
	c := connectV5(t, b.MQTTAddr(), "udeny-"+randHex(3), func(_ *pahov5.ClientConfig, cp *pahov5.Connect) {
		cp.UsernameFlag, cp.Username = true, "u"
		cp.PasswordFlag, cp.Password = true, []byte("p")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &pahov5.Subscribe{Subscriptions: []pahov5.SubscribeOptions{
		{Topic: "u/ro/x", QoS: 1}, {Topic: "u/wo/x", QoS: 1}, {Topic: "v/x", QoS: 1},
	}})
	if sa == nil {
		t.Fatalf("subscribe: %v", err)
	}
	if want := []byte{1, 0x87, 0x87}; string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons %#v, want %#v", sa.Reasons, want)
	}
	for topic, code := range map[string]byte{"u/ro/x": 0x87, "u/wo/x": 0} {
		pr, _ := c.Publish(ctx, &pahov5.Publish{Topic: topic, QoS: 1, Payload: []byte("m")})
		if pr == nil || pr.ReasonCode != code {
			t.Errorf("publish %s: PUBACK %+v, want reason %#x", topic, pr, code)
		}
	}
}

// FuzzACLAllows: any topic or filter a client sends is handled without a
// panic, and a deny filter always refuses the topic it names.
func FuzzACLAllows(f *testing.F) {
	for _, s := range []string{"a/b", "a/+", "#", "$share/g/a/#", "$SYS/x", "", "/", "a//b", "$share/", "+/+/#"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, topic string, write bool) {
		acl := ACL{Publish: []string{"a/#"}, Subscribe: []string{"+/b"}}
		_ = acl.allows(topic, write)
		if !validFilter(topic) || strings.HasPrefix(topic, "$share/") {
			return
		}
		deny := ACL{DenyPublish: []string{topic}, DenySubscribe: []string{topic}}
		if deny.allows(topic, write) {
			t.Fatalf("deny filter %q does not refuse itself (write=%v)", topic, write)
		}
	})
}
