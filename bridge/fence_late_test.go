package bridge

import (
	"encoding/json"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/state"
)

// TestFencedOwnersLateCheckpointFencedAgain (issue 50 part 5, second
// suspicion): a session record says its client is connected to instance
// "ghost", which never heartbeats: b fences it (disconnected, epoch one
// past, WillBy b) and publishes its Will. Then ghost's checkpoint, on its
// way when the fence landed (an owner cut off from Kafka but running),
// lands after it: connected, the lower epoch. Nobody owns the session to
// repair that write (ghost takes it for its own late write after a
// takeover), and a connected record never expires: b, which wrote the
// fence, writes it again over the late record (keeping its content), and
// the Will is not published twice.
func TestFencedOwnersLateCheckpointFencedAgain(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cb := testConfig(brokers)
	cb.State.HeartbeatInterval, cb.State.InstanceLapse = testBeat, testLapse
	b := startBridge(t, cb)
	id, willTopic := "late-"+randHex(4), "late/will/"+randHex(4)
	in := subscribeWills(t, b.MQTTAddr(), willTopic)
	will, err := json.Marshal(mqtt.Will{TopicName: willTopic, Payload: []byte("gone"), Qos: 1, Flag: 1})
	if err != nil {
		t.Fatal(err)
	}
	ghost := state.Session{Client: id, Owner: "ghost-" + randHex(3), Epoch: state.NextEpoch(0, time.Now()), Connected: true,
		Expiry: 3600, ProtocolVersion: 4, Will: will, Subs: []state.Subscription{{Filter: "late/x", QoS: 1}}}
	v, err := ghost.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rec := func() *kgo.Record { return &kgo.Record{Topic: cb.State.SessionsTopic, Key: []byte(id), Value: v} }
	prod := kgoProducer(t, brokers)
	produceAll(t, prod, []*kgo.Record{rec()})
	waitFor(t, 20*time.Second, "b to fence ghost's session and publish its Will", func() bool {
		r := b.stateEngine.Lookup(id)
		return in.count(willTopic) == 1 && r != nil && !r.Connected && r.WillBy == cb.Instance.ID
	})
	// ghost's late checkpoint: the same record, after the fence.
	produceAll(t, prod, []*kgo.Record{rec()})
	var last *state.Session
	waitFor(t, 10*time.Second, "the sessions topic's last record of the session to say disconnected again", func() bool {
		v, ok := readTable(t, cb.Kafka.Brokers, cb.State.SessionsTopic)[id]
		if !ok || v == nil {
			return false
		}
		last, err = state.DecodeSession(v)
		return err == nil && !last.Connected
	})
	if last.Epoch <= ghost.Epoch || last.WillBy != cb.Instance.ID || len(last.Subs) != 1 {
		t.Errorf("fenced again: epoch %d (ghost's %d), will_by %q, subscriptions %v: want the fence's epoch, b, ghost's subscription",
			last.Epoch, ghost.Epoch, last.WillBy, last.Subs)
	}
	noMore(t, in, map[string]int{willTopic: 1}, time.Second)
}

// TestSweepTombstoneAfterClaimRepaired (issue 50 part 5, first suspicion,
// which cannot happen): the expired-session sweep (session/wills_sweep.go)
// checks the record after reading the table to its end and then writes an
// unconditional tombstone; a client claiming the session in between has
// its claim in the log before that tombstone. The claimant owns the
// session from before its claim is written, reads the tombstone after its
// own claim, and writes its record again (repair on sight): the session
// keeps its subscriptions and positions. Here the tombstone is the test's,
// written after a persistent session's claim and subscription; the record
// comes back with the subscription, and a resume on another instance gets
// Session Present 1 and the subscription's messages.
func TestSweepTombstoneAfterClaimRepaired(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ca, cb := testConfig(brokers), testConfig(brokers)
	sharedState(&ca, &cb)
	a, b := startBridge(t, ca), startBridge(t, cb)
	id, topic := "swept-"+randHex(4), "swept/"+randHex(4)
	c := connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
	if tok := c.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{{Topic: ca.State.SessionsTopic, Key: []byte(id)}})
	waitFor(t, 10*time.Second, "the owner to write its record again over the tombstone", func() bool {
		v, ok := readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic)[id]
		if !ok || v == nil {
			return false
		}
		rec, err := state.DecodeSession(v)
		return err == nil && len(rec.Subs) == 1 && rec.Subs[0].Filter == topic
	})
	c.Disconnect(100)
	waitFor(t, 10*time.Second, "session offline", func() bool { return sessionOffline(a, id) })
	got := make(chan string, 10)
	connectPaho(t, b.MQTTAddr(), id, persistentInto(got))
	pub := connectPaho(t, b.MQTTAddr(), "swept-pub-"+randHex(3))
	if tok := pub.Publish(topic, 1, false, "after"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	waitAll(t, got, "the resumed session's subscription, after the tombstone", "after")
}
