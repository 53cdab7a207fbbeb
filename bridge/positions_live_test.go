package bridge

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestResumeAfterLocalDeliveryOvertookReverse: one partition reaches a
// persistent session by two paths. Records other writers put in Kafka come
// through the reverse consumer (held back here, as when it lags behind
// slow subscribers); a publish on this instance comes through the local
// delivery at once. The session acknowledges the local one (offset 5) and
// goes: the position it leaves must not pass offsets 0..4, which nobody
// delivered to it yet. The reverse path then hands them out while the
// session is away (to nobody), and the resume must still bring them.
// Before, the position was 6 and the resume brought nothing.
func TestResumeAfterLocalDeliveryOvertookReverse(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "twopath")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	hold := make(chan struct{})
	cfg.reverseHold = hold
	b := startBridge(t, cfg)

	id := "twopath-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	sub := connectPaho(t, b.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(m, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	var want []string
	var recs []*kgo.Record
	for i := range 5 {
		want = append(want, fmt.Sprint("r", i))
		recs = append(recs, &kgo.Record{Topic: k, Value: []byte(want[i])})
	}
	produceAll(t, kgoProducer(t, brokers), recs)
	pub := connectPaho(t, b.MQTTAddr(), "twopath-pub-"+randHex(3))
	if tok := pub.Publish(m, 1, false, "m5"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	wantFirst(t, got, "m5", "the local delivery (the reverse path is held)")
	// The PUBACK of m5 is in before the client goes (Paho sends it after
	// the handler, and Disconnect does not wait): without it the position
	// stays at 0 whatever the product does, and the test proves nothing.
	waitAcked(t, b, id)
	sub.Disconnect(250)
	wantPositionAtMost(t, cfg, id, k, 0, "past offsets 0..4, which the reverse path had not delivered yet")

	// The reverse path goes on while the session is away: what it hands
	// out now reaches nobody, and must not count for the session.
	close(hold)
	waitFor(t, 10*time.Second, "the reverse path past the records", func() bool {
		next, _, known := b.stateEngine.ReverseLimit(k, 0)
		return known && next >= 6
	})
	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	var arrived []string
	deadline := time.After(20 * time.Second)
	missing := func() bool {
		return slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(arrived, w) })
	}
	for missing() {
		select {
		case p := <-got:
			arrived = append(arrived, p)
		case <-deadline:
			t.Fatalf("after the resume the session got %v, want %v (each at least once)", arrived, want)
		}
	}
}

// TestResumeBringsOwnQoS2RecordOvertakenByReverse: the QoS 2 twin of the
// own-record hold (session/reverse_progress.go). A QoS 2 publish on this instance
// is in Kafka (offset 0) but held before mochi writes its PUBREC and
// delivers it locally (as it is while an earlier publish of its client
// awaits Kafka); the reverse consumer skips it (its own record: the local
// delivery brings it) and hands out a later record of another writer,
// which the persistent session acknowledges before it goes. Its position
// must stay at 0, and the resume must bring the QoS 2 message. Before, the
// position was 2 and the resume brought nothing.
func TestResumeBringsOwnQoS2RecordOvertakenByReverse(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "own2")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	b := startBridge(t, cfg)
	pubID := "own2-pub-" + randHex(3)
	gate := &holdQoS2{id: pubID, entered: make(chan struct{}, 1), release: make(chan struct{})}
	if err := b.server.AddHook(gate, nil); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(gate.release)
		}
	}()

	id := "own2-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	sub := connectPaho(t, b.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(m, 2, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connectPaho(t, b.MQTTAddr(), pubID)
	own := pub.Publish(m, 2, false, "own")
	select {
	case <-gate.entered: // Kafka has it; PUBREC and local delivery wait
	case <-time.After(10 * time.Second):
		t.Fatal("the QoS 2 publish did not reach the hold")
	}
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{{Topic: k, Value: []byte("r1")}})
	wantFirst(t, got, "r1", "from the reverse path (the QoS 2 publish is held)")
	waitAcked(t, b, id) // r1's PUBACK is in: otherwise the position stays at 0 anyway
	sub.Disconnect(250)
	wantPositionAtMost(t, cfg, id, k, 0, "past its own QoS 2 record at 0, which it never got")
	close(gate.release)
	released = true
	if !own.WaitTimeout(10*time.Second) || own.Error() != nil {
		t.Fatalf("QoS 2 publish: %v", own.Error())
	}
	// Delivered (to nobody: the session is away): the hold ends.
	waitFor(t, 10*time.Second, "the reverse path's progress released past the QoS 2 record", func() bool {
		next, _, known := b.stateEngine.ReverseLimit(k, 0)
		return known && next >= 2
	})
	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case p := <-got:
			if p == "own" {
				return
			}
		case <-deadline:
			t.Fatal("the resume did not bring the QoS 2 message")
		}
	}
}

// holdQoS2 holds one client's QoS 2 PUBLISH in OnPublish, after Ferry's
// hook (added first) let it through: Kafka has it, mochi has not written
// the PUBREC nor delivered it yet.
type holdQoS2 struct {
	mqtt.HookBase
	id      string
	entered chan struct{}
	release chan struct{}
}

func (h *holdQoS2) ID() string { return "test-hold-qos2" }

func (h *holdQoS2) Provides(b byte) bool { return b == mqtt.OnPublish }

func (h *holdQoS2) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.ID == h.id && pk.FixedHeader.Qos == 2 {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		<-h.release
	}
	return pk, nil
}

// TestDroppedDeliveryComesWithResume: a persistent session's writes are
// held up (as the replay's last pass holds live deliveries, session/replay_hold.go)
// while QoS 1 messages for it keep coming; its outbound queue
// (mqtt.client_writes_pending 4) overflows, and mochi drops deliveries
// after putting them in flight, and never redelivers them. The session
// must still get every message when it resumes on the same instance.
// Before, the dropped ones stayed recorded as in flight, the resume counted
// on mochi to resend them, and they were lost (15 of 20).
func TestDroppedDeliveryComesWithResume(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cfg := testConfig(brokers)
	cfg.MQTT.ClientWritesPending = 4
	b := startBridge(t, cfg)
	topic, id := "drop/"+randHex(4), "drop-"+randHex(3)
	block := &blockWrites{id: id, release: make(chan struct{})}
	if err := b.server.AddHook(block, nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 100)
	persistent := persistentInto(got)
	sub := connectPaho(t, b.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	block.on.Store(true)
	pub := connectPaho(t, b.MQTTAddr(), "drop-pub-"+randHex(3))
	const n = 20
	for i := range n {
		if tok := pub.Publish(topic, 1, false, fmt.Sprint(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	if drops := metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil); drops == 0 {
		t.Fatal("no delivery dropped: the test did not overflow the outbound queue")
	}
	block.on.Store(false)
	close(block.release)
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "the session offline", func() bool {
		return sessionOffline(b, id)
	})

	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	seen := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < n {
		select {
		case p := <-got:
			seen[p] = true
		case <-deadline:
			var missing []int
			for i := range n {
				if !seen[fmt.Sprint(i)] {
					missing = append(missing, i)
				}
			}
			t.Fatalf("the session has %d of %d messages; missing %v", len(seen), n, missing)
		}
	}
}

// blockWrites holds one client's outgoing PUBLISH packets in OnPacketEncode
// (before mochi takes the client's lock) while on, until release closes.
type blockWrites struct {
	mqtt.HookBase
	id      string
	on      atomic.Bool
	release chan struct{}
}

func (h *blockWrites) ID() string { return "test-block-writes" }

func (h *blockWrites) Provides(b byte) bool { return b == mqtt.OnPacketEncode }

func (h *blockWrites) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if h.on.Load() && cl.ID == h.id && pk.FixedHeader.Type == packets.Publish {
		<-h.release
	}
	return pk
}

// wantFirst fails unless the next message in got is want (why: where it
// comes from) within 10 s.
func wantFirst(t *testing.T, got <-chan string, want, why string) {
	t.Helper()
	select {
	case p := <-got:
		if p != want {
			t.Fatalf("got %q first, want %s %s", p, want, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s did not arrive", want, why)
	}
}

// wantPositionAtMost waits for client id's record to say it disconnected,
// and fails if its position in Kafka topic k passes max (why: what lies
// beyond).
func wantPositionAtMost(t *testing.T, cfg Config, id, k string, max int64, why string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the session's record after the disconnect", func() bool {
		rec := sessionIn(t, readTable(t, cfg.Kafka.Brokers, cfg.State.SessionsTopic), id)
		if rec == nil || rec.Connected {
			return false
		}
		for _, p := range rec.Positions {
			if p.Topic == k && p.Offset > max {
				t.Fatalf("the session left position %d in %s/%d: %s", p.Offset, k, p.Partition, why)
			}
		}
		return true
	})
}

// persistentInto makes a paho client a persistent session (clean session
// 0) whose messages' payloads go to got.
func persistentInto(got chan<- string) func(*pahov3.ClientOptions) {
	return func(o *pahov3.ClientOptions) {
		o.SetCleanSession(false).SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) { got <- string(m.Payload()) })
	}
}
