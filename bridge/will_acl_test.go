package bridge

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// willACL is the set-up of issue 50's Will tests: user mallory may publish
// under root/open/# and not under root/secret/#; reader may read
// everything. Each Will is retained, QoS 1.
type willACL struct {
	root, secret, open string
	users              []User
}

func newWillACL() willACL {
	root := "ferrytest/wacl" + randHex(4)
	w := willACL{root: root, secret: root + "/secret/cmd", open: root + "/open/cmd"}
	w.users = []User{
		{Username: "mallory", Password: "m", ACL: ACL{Publish: []string{root + "/open/#"}, DenyPublish: []string{root + "/secret/#"}}},
		{Username: "reader", Password: "r"},
	}
	return w
}

// rawWillConnect sends, on a raw connection to addr, a CONNECT (MQTT
// version 4 or 5, clean) of mallory with a retained QoS 1 Will on topic,
// and returns the connection and the CONNACK's return code / reason code.
func rawWillConnect(t *testing.T, addr, id, topic string, version byte) (net.Conn, byte) {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Keepalive: 60, Clean: true,
			UsernameFlag: true, Username: []byte("mallory"), PasswordFlag: true, Password: []byte("m"),
			WillFlag: true, WillTopic: topic, WillPayload: []byte("forged-by-mallory"), WillQos: 1, WillRetain: true}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	c := rawConn(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	first, err := r.ReadByte()
	if err != nil {
		t.Fatalf("CONNACK: %v", err)
	}
	var fh packets.FixedHeader
	if err := fh.Decode(first); err != nil || fh.Type != packets.Connack {
		t.Fatalf("first packet: type %d, %v", fh.Type, err)
	}
	n, mult := 0, 1
	for range 4 {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		n += int(b&127) * mult
		mult *= 128
		if b < 128 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, body[1]
}

// kafkaRecords is how many records a topic has (0: no such topic).
func kafkaRecords(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// retainedSeen subscribes a fresh reader to root/# on addr until it has
// the open Will's retained message, and returns what it got per topic.
func (w willACL) retainedSeen(t *testing.T, addr string) *willInbox {
	t.Helper()
	in := newWillInbox()
	c := connectPaho(t, addr, "fresh-"+randHex(4), as("reader", "r"))
	tok := c.Subscribe(w.root+"/#", 1, func(_ pahov3.Client, m pahov3.Message) { in.add(m.Topic(), string(m.Payload())) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	waitFor(t, 10*time.Second, "the open Will retained, for a fresh subscriber", func() bool { return in.count(w.open) > 0 })
	return in
}

// TestWillDeniedByACL (issue 50): mallory's CONNECT with a Will on a topic
// her publish ACL denies is refused Not authorized (MQTT 3.1.1 return code
// 5, MQTT 5 0x87), as Mosquitto refuses it; when she drops the connection
// (no DISCONNECT) nothing is published: a subscribed reader gets nothing,
// no retained message, nothing in Kafka. Her Will on an allowed topic, the
// control, is accepted and published everywhere.
func TestWillDeniedByACL(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	w := newWillACL()
	cfg := testConfig(brokers)
	cfg.MQTT.Users = w.users
	b := startBridge(t, cfg)
	in := subscribeWillsAs(t, b.MQTTAddr(), w.root+"/#")
	for _, v := range []struct {
		version byte
		refused byte
	}{{4, 5}, {5, 0x87}} {
		c, code := rawWillConnect(t, b.MQTTAddr(), "mallory-"+randHex(3), w.secret, v.version)
		if code != v.refused {
			t.Errorf("MQTT v%d CONNECT with a Will on %s (denied): CONNACK 0x%02x, want 0x%02x", v.version, w.secret, code, v.refused)
		}
		c.Close() // dropped, no DISCONNECT
	}
	c, code := rawWillConnect(t, b.MQTTAddr(), "mallory-"+randHex(3), w.open, 4)
	if code != 0 {
		t.Fatalf("CONNECT with a Will on %s (allowed): CONNACK 0x%02x, want 0", w.open, code)
	}
	c.Close()
	waitFor(t, 10*time.Second, "the allowed Will at the reader", func() bool { return in.count(w.open) > 0 })
	if n := in.count(w.secret); n != 0 {
		_, p := in.first(w.secret)
		t.Fatalf("the reader got %d messages on %s (%q), denied to their publisher", n, w.secret, p)
	}
	if n := w.retainedSeen(t, b.MQTTAddr()).count(w.secret); n != 0 {
		t.Fatalf("a fresh subscriber got %d retained messages on %s", n, w.secret)
	}
	waitFor(t, 10*time.Second, "the allowed Will in Kafka", func() bool {
		return kafkaRecords(t, cfg.Kafka.Brokers, kafkaName(t, w.open)) == 1
	})
	if n := kafkaRecords(t, cfg.Kafka.Brokers, kafkaName(t, w.secret)); n != 0 {
		t.Fatalf("%d records of %s in Kafka", n, w.secret)
	}
	if _, ok := readTable(t, cfg.Kafka.Brokers, cfg.State.RetainedTopic)[w.secret]; ok {
		t.Fatalf("the retained table has %s", w.secret)
	}
}

// subscribeWillsAs is subscribeWills as the reader.
func subscribeWillsAs(t *testing.T, addr, filter string) *willInbox {
	t.Helper()
	in := newWillInbox()
	sub := connectPaho(t, addr, "sub-"+randHex(4), as("reader", "r"))
	tok := sub.Subscribe(filter, 1, func(_ pahov3.Client, m pahov3.Message) { in.add(m.Topic(), string(m.Payload())) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return in
}

// TestWillOfKilledInstanceDeniedByACL (issue 50): instance a (cmd/bridge)
// runs an older ACL that lets mallory publish anywhere, so it admits her
// Will on root/secret/cmd; a is killed (-9). The survivor b, whose ACL
// denies her that topic, does not publish it: its reader gets nothing, no
// retained message, nothing in Kafka (ferry_wills_denied_total 1). Her
// Will on root/open/cmd, the control, b publishes.
func TestWillOfKilledInstanceDeniedByACL(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	w := newWillACL()
	old := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.WriteFile(old, []byte("mqtt:\n  users:\n    - username: mallory\n      password: m\n    - username: reader\n      password: r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb := testConfig(brokers)
	useStateEnv(t, &cb)
	cb.State.HeartbeatInterval, cb.State.InstanceLapse = testBeat, testLapse
	cb.MQTT.Users = w.users
	b := startBridge(t, cb)
	a := startFerry(t, "a", old, willEnv(brokers, "a")...)
	in := subscribeWillsAs(t, b.MQTTAddr(), w.root+"/#")

	secretID, openID := "mallory-s-"+randHex(3), "mallory-o-"+randHex(3)
	for id, topic := range map[string]string{secretID: w.secret, openID: w.open} {
		if _, code := rawWillConnect(t, a.MQTTAddr, id, topic, 4); code != 0 {
			t.Fatalf("a (older ACL): CONNECT with a Will on %s: CONNACK 0x%02x, want 0", topic, code)
		}
	}
	waitFor(t, 10*time.Second, "b reads a's two claims", func() bool {
		for _, id := range []string{secretID, openID} {
			if s := b.stateEngine.Lookup(id); s == nil || !s.Connected {
				return false
			}
		}
		return true
	})
	a.kill9()
	waitFor(t, testLapse+15*time.Second, "the allowed Will, published by b", func() bool { return in.count(w.open) > 0 })
	waitFor(t, 10*time.Second, "b's decision on the denied Will", func() bool {
		return in.count(w.secret) > 0 || metricValue(t, b, "ferry_wills_denied_total", nil) == 1
	})
	if n := in.count(w.secret); n != 0 {
		_, p := in.first(w.secret)
		t.Fatalf("b's reader got %d messages on %s (%q): a dead instance's client's Will its user's ACL denies", n, w.secret, p)
	}
	noMore(t, in, map[string]int{w.secret: 0, w.open: 1}, 2*testLapse)
	if n := w.retainedSeen(t, b.MQTTAddr()).count(w.secret); n != 0 {
		t.Fatalf("a fresh subscriber got %d retained messages on %s", n, w.secret)
	}
	if n := kafkaRecords(t, cb.Kafka.Brokers, kafkaName(t, w.secret)); n != 0 {
		t.Fatalf("%d records of %s in Kafka", n, w.secret)
	}
	if _, ok := readTable(t, cb.Kafka.Brokers, cb.State.RetainedTopic)[w.secret]; ok {
		t.Fatalf("the retained table has %s", w.secret)
	}
}
