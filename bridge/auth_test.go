package bridge

import (
	"context"
	"testing"
	"time"

	pahov5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/bcrypt"
)

func TestFilterMatches(t *testing.T) {
	tests := []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/b", "a/b/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "x/y", true},
		{"+/+", "x/y", true},
		// Subscription filters are checked against the ACL filter: a
		// subscription may not widen what the ACL permits.
		{"a/+", "a/+", true},
		{"a/+", "a/#", false},
		{"a/b", "a/+", false},
		{"a/#", "a/+/c", true},
		{"a/#", "a/#", true},
		{"+/b", "+/b", true},
		// '$' topics are not covered by leading wildcards (MQTT 4.7.2).
		{"#", "$SYS/broker/load", false},
		{"+/broker/load", "$SYS/broker/load", false},
		{"$SYS/#", "$SYS/broker/load", true},
	}
	for _, tt := range tests {
		if got := filterMatches(tt.filter, tt.topic); got != tt.want {
			t.Errorf("filterMatches(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
}

func TestPasswordOK(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		stored, given string
		want          bool
	}{
		{"s3cret", "s3cret", true},
		{"s3cret", "s3cre", false},
		{"s3cret", "", false},
		{string(hash), "s3cret", true},
		{string(hash), "wrong", false},
		{string(hash), string(hash), false}, // the hash itself is not the password
		// htpasswd -B writes $2y$: the same algorithm.
		{"$2y$" + string(hash[4:]), "s3cret", true},
		{"$2b$" + string(hash[4:]), "s3cret", true},
	}
	for _, tt := range tests {
		if got := passwordOK(tt.stored, []byte(tt.given)); got != tt.want {
			t.Errorf("passwordOK(%q, %q) = %v, want %v", tt.stored, tt.given, got, tt.want)
		}
	}
}

// authConfig has a plain-text user and a bcrypt user, each with an ACL.
// No brokers: the embedded Kafka is enough for authentication tests.
func authConfig(t *testing.T) Config {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("hashed-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("")
	cfg.MQTT.Users = []User{
		{Username: "plain", Password: "plain-secret"},
		{Username: "sensor", Password: string(hash),
			ACL: ACL{Publish: []string{"fleet/+/telemetry"}, Subscribe: []string{"fleet/+/cmd"}}},
	}
	return cfg
}

// tryPaho connects an MQTT 3.1.1 client and returns the connect error.
func tryPaho(t *testing.T, addr, id, user, pass string) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	if user != "" {
		o.SetUsername(user).SetPassword(pass)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("paho connect: no answer within 10s")
	}
	if tok.Error() == nil {
		t.Cleanup(func() { c.Disconnect(100) })
	}
	return c, tok.Error()
}

func TestAuthPasswords(t *testing.T) {
	b := startBridge(t, authConfig(t))
	addr := b.MQTTAddr()
	tests := []struct {
		name, user, pass string
		ok               bool
	}{
		{"plain password accepted", "plain", "plain-secret", true},
		{"wrong password refused", "plain", "nope", false},
		{"bcrypt password accepted", "sensor", "hashed-secret", true},
		{"wrong password for bcrypt user refused", "sensor", "hashed-secre", false},
		{"unknown user refused", "mallory", "plain-secret", false},
		{"anonymous refused when users are configured", "", "", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryPaho(t, addr, "auth-"+randHex(3)+string(rune('a'+i)), tt.user, tt.pass)
			if tt.ok && err != nil {
				t.Fatalf("connect as %q: %v, want accepted", tt.user, err)
			}
			if !tt.ok && err == nil {
				t.Fatalf("connect as %q with password %q accepted, want refused", tt.user, tt.pass)
			}
		})
	}
}

func TestAuthAllowAnonymousWithUsers(t *testing.T) {
	cfg := authConfig(t)
	cfg.MQTT.AllowAnonymous = true
	b := startBridge(t, cfg)
	c, err := tryPaho(t, b.MQTTAddr(), "anon-"+randHex(3), "", "")
	if err != nil {
		t.Fatalf("anonymous connect with allow_anonymous: %v", err)
	}
	tok := c.Publish("anything/goes", 1, false, "x")
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("anonymous QoS1 publish: %v", tok.Error())
	}
	if _, err := tryPaho(t, b.MQTTAddr(), "bad-"+randHex(3), "plain", "nope"); err == nil {
		t.Fatal("wrong password accepted with allow_anonymous")
	}
}

// TestACLDeniesPublishV5: a v5 QoS 1 publish to a topic outside the user's
// publish filters gets PUBACK reason 0x87 (not authorized) and is not
// bridged; an allowed topic gets 0x00.
func TestACLDeniesPublishV5(t *testing.T) {
	b := startBridge(t, authConfig(t))
	c := connectV5(t, b.MQTTAddr(), "acl-v5-"+randHex(3), func(_ *pahov5.ClientConfig, cp *pahov5.Connect) {
		cp.UsernameFlag, cp.Username = true, "sensor"
		cp.PasswordFlag, cp.Password = true, []byte("hashed-secret")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	pr, err := c.Publish(ctx, &pahov5.Publish{Topic: "fleet/other/secrets", QoS: 1, Payload: []byte("no")})
	if pr == nil {
		t.Fatalf("forbidden publish: no PUBACK: %v", err)
	}
	if pr.ReasonCode != 0x87 {
		t.Fatalf("forbidden publish: PUBACK reason %#x (%v), want 0x87 not authorized", pr.ReasonCode, err)
	}
	if err == nil {
		t.Fatal("forbidden publish: client reports success")
	}

	pr, err = c.Publish(ctx, &pahov5.Publish{Topic: "fleet/dev1/telemetry", QoS: 1, Payload: []byte("yes")})
	if err != nil || pr == nil || pr.ReasonCode != 0 {
		t.Fatalf("allowed publish: %v (response %+v), want PUBACK 0x00", err, pr)
	}

	// Subscribe ACL: an allowed filter, one outside the ACL and one that
	// would widen the allowed filter.
	sa, err := c.Subscribe(ctx, &pahov5.Subscribe{Subscriptions: []pahov5.SubscribeOptions{
		{Topic: "fleet/+/cmd", QoS: 1},
		{Topic: "fleet/dev1/telemetry", QoS: 1},
		{Topic: "fleet/#", QoS: 1},
	}})
	if sa == nil {
		t.Fatalf("subscribe: no SUBACK: %v", err)
	}
	want := []byte{1, 0x87, 0x87}
	if string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons %#v, want %#v", sa.Reasons, want)
	}
	// Only the allowed publish was bridged.
	if got := counterValue(t, b.reg, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "1"}); got != 1 {
		t.Fatalf("publishes received (bridged) = %v, want 1", got)
	}
}

// TestACLDeniesPublishV3: MQTT 3.1.1 has no negative PUBACK: the client is
// disconnected and the message is not acknowledged.
func TestACLDeniesPublishV3(t *testing.T) {
	b := startBridge(t, authConfig(t))
	lost := make(chan error, 1)
	o := paho.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID("acl-v3-" + randHex(3)).
		SetUsername("sensor").SetPassword("hashed-secret").
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case lost <- err:
			default:
			}
		})
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	tok := c.Publish("fleet/other/secrets", 1, false, "no")
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("client not disconnected after a forbidden QoS 1 publish")
	}
	// The token either stays incomplete or completes with an error: never
	// acknowledged.
	if tok.WaitTimeout(2*time.Second) && tok.Error() == nil {
		t.Fatal("forbidden publish reported as acknowledged")
	}
	if got := counterValue(t, b.reg, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "1"}); got != 0 {
		t.Fatalf("forbidden publish was bridged: publishes received = %v", got)
	}
}
