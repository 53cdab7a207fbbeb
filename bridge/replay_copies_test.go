package bridge

import (
	"fmt"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
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
	waitFor(t, 30*time.Second, "the replay to end", func() bool { return !b.stateEngine.Injections().Replaying() })
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
	waitFor(t, 30*time.Second, "the replay to end", func() bool { return !b.stateEngine.Injections().Replaying() })
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
