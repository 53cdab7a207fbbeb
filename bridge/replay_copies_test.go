package bridge

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestResumeDeliversReverseTopicRecordsOnce (issue 31): reverse.topics is
// a regex, and a persistent QoS 1 session subscribed to an MQTT filter
// under it goes offline cleanly. Three records arrive in a new Kafka
// topic under the regex, whose name the default rule maps back to a topic
// the filter matches: the topic is both one the session's filter maps to
// and a reverse topic. The clean reconnect to the same instance must bring
// each of them exactly once. Before, each came twice.
func TestResumeDeliversReverseTopicRecordsOnce(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tag := "once" + randHex(4)
	cfg := testConfig(brokers)
	cfg.Reverse.Topics = []string{"/^_ferrytest_" + tag + "_.*/"}
	cfg.Reverse.StartOffset = "earliest"
	cfg.Reverse.Refresh = 2 * time.Second
	b := startBridge(t, cfg)

	id := "once-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	subscribeThenGoOffline(t, b, id, "/ferrytest/"+tag+"/#", persistent)

	k := "_ferrytest_" + tag + "_a_le" // MQTT /ferrytest/<tag>/a/le
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	var recs []*kgo.Record
	for i := range 3 {
		recs = append(recs, &kgo.Record{Topic: k, Value: []byte(fmt.Sprint("m", i))})
	}
	pr := kgoProducer(t, brokers)
	produceAll(t, pr, recs)

	sub := connectPaho(t, b.MQTTAddr(), id, persistent, func(o *paho.ClientOptions) { o.SetOrderMatters(true) })
	defer sub.Disconnect(100)
	counts := map[string]int{}
	deadline := time.After(30 * time.Second)
	countUntil(t, got, counts, deadline, "m0", "m1", "m2")
	// Once the replay is over, a last record of the same partition is the
	// barrier: a copy of m0..m2 from any path comes before it.
	waitFor(t, 30*time.Second, "the replay to end", func() bool { return b.sessionHook.inj.replaying.Load() == 0 })
	produceAll(t, pr, []*kgo.Record{{Topic: k, Value: []byte("end")}})
	countUntil(t, got, counts, deadline, "end")
	wantOnce(t, counts, "m0", "m1", "m2", "end")
	// 3 when the reverse path found the topic after the replay, as it
	// does unless the resume is seconds late.
	t.Logf("live copies discarded: %v", metricValue(t, b, "ferry_sessions_live_copies_discarded_total", nil))
}

// TestResumeDeliversForwardTopicRecordsOnceBehindReverse: the three
// instance case of issue 31. A publisher on instance A writes to its
// forward topic, which instance B consumes as a reverse topic; a
// persistent session on B is offline meanwhile, and B's reverse path is
// behind (held here: in the kill -9 run it lagged behind a reconnect
// storm). The session's clean reconnect to B replays the three messages;
// B's reverse path then hands the same records out live, and the session
// must not get them again. Before, it got each twice (302 deliveries of
// 200 messages in the three-instance run).
func TestResumeDeliversForwardTopicRecordsOnceBehindReverse(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tag := "fwdrev" + randHex(4)
	k := "_ferrytest_" + tag + "_p" // A's forward topic for /ferrytest/<tag>/p
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	a := startBridge(t, testConfig(brokers))
	cfgB := testConfig(brokers)
	cfgB.Reverse.Topics = []string{"/^_ferrytest_" + tag + "_.*/"}
	cfgB.Reverse.StartOffset = "earliest"
	cfgB.Reverse.Refresh = 2 * time.Second
	hold := make(chan struct{})
	cfgB.reverseHold = hold
	b := startBridge(t, cfgB)

	id := "fwdrev-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	inOrder := func(o *paho.ClientOptions) { o.SetOrderMatters(true) }
	subscribeThenGoOffline(t, b, id, "/ferrytest/"+tag+"/#", persistent)
	pub := connectPaho(t, a.MQTTAddr(), "fwdrev-pub-"+randHex(3))
	publish := func(p string) {
		t.Helper()
		if tok := pub.Publish("/ferrytest/"+tag+"/p", 1, false, p); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", p, tok.Error())
		}
	}
	for i := range 3 {
		publish(fmt.Sprint("m", i))
	}

	sub := connectPaho(t, b.MQTTAddr(), id, persistent, inOrder)
	defer sub.Disconnect(100)
	counts := map[string]int{}
	deadline := time.After(30 * time.Second)
	countUntil(t, got, counts, deadline, "m0", "m1", "m2")
	waitFor(t, 30*time.Second, "the replay to end", func() bool { return b.sessionHook.inj.replaying.Load() == 0 })
	close(hold) // B's reverse path catches up: m0..m2, then the barrier
	publish("end")
	countUntil(t, got, counts, deadline, "end")
	wantOnce(t, counts, "m0", "m1", "m2", "end")
	if n := metricValue(t, b, "ferry_sessions_live_copies_discarded_total", nil); n != 3 {
		t.Errorf("%v live copies discarded, want 3 (B's reverse path handed out m0..m2 after the replay)", n)
	}
}

// countUntil counts the payloads arriving on got until each of want has
// come at least once, failing at deadline with what came.
func countUntil(t *testing.T, got <-chan string, counts map[string]int, deadline <-chan time.Time, want ...string) {
	t.Helper()
	for _, w := range want {
		for counts[w] == 0 {
			select {
			case p := <-got:
				counts[p]++
			case <-deadline:
				t.Fatalf("the session got %v, want %v at least once each", counts, want)
			}
		}
	}
}

// wantOnce fails unless each of msgs was counted exactly once.
func wantOnce(t *testing.T, counts map[string]int, msgs ...string) {
	t.Helper()
	for _, m := range msgs {
		if counts[m] != 1 {
			t.Errorf("after a clean reconnect the session got %s %d times, want once (all: %v)", m, counts[m], counts)
		}
	}
}

// TestLiveCopyDiscardedAndNothingElse: the mechanics under the two tests
// above. A session's replay read partition k/0 to offset 5 for filter q/#.
// A live delivery of offset 3 on q/a is a copy: in flight until the write
// loop reaches it, not the client's to acknowledge (the replay's window
// does not count it), then out of flight and not written. Offset 5 (past
// the replay), offset 3 on a topic the replay's filters do not match (a
// filter subscribed since) and a retained message mochi sends on a
// SUBSCRIBE while the record at 3 is injected are delivered. A packet that
// reuses the id of a copy mochi dropped unwritten is written.
func TestLiveCopyDiscardedAndNothingElse(t *testing.T) {
	h, o := hookWithSession(t)
	h.inj = new(injections)
	cl := o.cl
	o.pos.startReplay([]string{"q/#"})
	o.pos.replayed(tp{"k", 0}, 5)
	o.pos.caughtUp(0)
	deliver := func(off int64, pid uint16, topic, payload string, retain bool) packets.Packet {
		t.Helper()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: retain}, TopicName: topic,
			Payload: []byte(payload), PacketID: pid, Origin: "pub"}
		cl.State.Inflight.Set(pk)
		h.inj.begin("pub", coord{"k", 0, off}, topic)
		h.OnQosPublish(cl, pk, 0, 0)
		h.inj.end("pub")
		return pk
	}
	written := func(pk packets.Packet) bool { return h.OnPacketEncode(cl, pk).Mods.MaxSize != 1 }

	cp := deliver(3, 1, "q/a", "copy", false)
	if n := h.copies.pending(cl); n != 1 {
		t.Fatalf("%d copies pending after a live delivery of offset 3, want 1", n)
	}
	if _, ok := cl.State.Inflight.Get(1); !ok {
		t.Fatal("the copy left flight before its write: its packet id could go to another delivery")
	}
	fresh := deliver(5, 2, "q/a", "fresh", false)
	other := deliver(3, 3, "r/x", "other filter", false)
	retained := deliver(3, 4, "q/a", "retained", true)
	if written(cp) {
		t.Error("the live copy of offset 3 is written: the replay delivered it")
	}
	if _, ok := cl.State.Inflight.Get(1); ok {
		t.Error("the discarded copy is still in flight")
	}
	for _, pk := range []packets.Packet{fresh, other, retained} {
		if !written(pk) {
			t.Errorf("%s (packet id %d) is not written", pk.Payload, pk.PacketID)
		}
	}
	if got := o.pos.pendingList(); len(got) != 3 || got[0].PacketID != 2 {
		t.Errorf("pending deliveries %+v, want packet ids 2, 3 and 4 (the copy is not one)", got)
	}

	dropped := deliver(4, 5, "q/a", "dropped", false)
	cl.State.Inflight.Delete(dropped.PacketID) // mochi drops it from a full write queue
	reuse := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/a",
		Payload: []byte("dropped"), PacketID: dropped.PacketID, Origin: "pub"}
	if !written(reuse) {
		t.Error("a packet reusing the id of a copy mochi dropped is not written")
	}
}
