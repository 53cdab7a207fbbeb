package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestResumeReadsReverseTopicsFromHorizon: a reverse topic may carry any
// MQTT topic (the mqtt.topic header), so a resume reads every reverse
// partition the session has no position in. It reads them from the
// session's horizon, not from its subscription's time: the 2,000 records
// of another MQTT topic that the reverse path handed out while the session
// was live are not read again when it resumes on another instance. What
// came while it was away is still delivered, including a record of that
// same Kafka topic carrying the session's MQTT topic in its header. Before
// the horizon the replay read all 2,000 again.
func TestResumeReadsReverseTopicsFromHorizon(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kA, mA := revTopic(t, "hzna")
	kB, _ := revTopic(t, "hznb")
	kafkatest.CreateTopic(t, brokers, kA, 1, nil)
	kafkatest.CreateTopic(t, brokers, kB, 1, nil)
	cfg := reverseConfig(brokers, kA, kB)
	a := startBridge(t, cfg)
	id := "hzn-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	sub := connectPaho(t, a.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(mA, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	const noise = 2000
	recs := make([]*kgo.Record, noise)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: kB, Value: []byte("noise")}
	}
	pr := kgoProducer(t, brokers)
	produceAll(t, pr, recs)
	covers := time.Now().Add(-session.HorizonSlack).UnixMilli()
	waitFor(t, 20*time.Second, "the reverse path's horizon past the noise", func() bool {
		return a.stateEngine.ReverseHorizon() >= covers
	})
	sub.Disconnect(250)
	waitFor(t, 10*time.Second, "the session's record after the disconnect", func() bool {
		rec := sessionIn(t, readTable(t, cfg.Kafka.Brokers, cfg.State.SessionsTopic), id)
		return rec != nil && !rec.Connected && rec.Horizon >= covers
	})

	produceAll(t, pr, []*kgo.Record{{Topic: kA, Value: []byte("a1")},
		{Topic: kB, Value: []byte("via-b"), Headers: []kgo.RecordHeader{{Key: topicmap.HeaderMQTTTopic, Value: []byte(mA)}}}})
	cfgB := cfg
	cfgB.Instance.ID = "test-" + randHex(4)
	b := startBridge(t, cfgB)
	read0 := metricValue(t, b, "ferry_sessions_replay_read_total", nil)
	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	want := map[string]bool{"a1": false, "via-b": false}
	deadline := time.After(20 * time.Second)
	for n := 0; n < len(want); {
		select {
		case p := <-got:
			if seen, ok := want[p]; ok && !seen {
				want[p] = true
				n++
			}
		case <-deadline:
			t.Fatalf("after the resume on another instance: %v (true: arrived)", want)
		}
	}
	if read := metricValue(t, b, "ferry_sessions_replay_read_total", nil) - read0; read >= noise/4 {
		t.Fatalf("the replay read %.0f records: it read again the %d the session's horizon covers", read, noise)
	}
}

// TestHorizonAfterRestart: an instance restarted with the same id has
// handed out nothing in its new run of a partition that got no record
// since; its group's committed offset at the end says nothing is left
// there, so the horizon moves (else it stayed 0, and every resume read from
// the subscriptions' time, until each consumed partition had a record).
func TestHorizonAfterRestart(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kA, _ := revTopic(t, "hzra")
	kafkatest.CreateTopic(t, brokers, kA, 2, nil)
	cfg := reverseConfig(brokers, kA)
	a := startBridge(t, cfg)
	recs := []*kgo.Record{{Topic: kA, Partition: 0, Value: []byte("x")}, {Topic: kA, Partition: 1, Value: []byte("y")}}
	pr, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	produceAll(t, pr, recs)
	waitFor(t, 20*time.Second, "the first run's horizon", func() bool { return a.stateEngine.ReverseHorizon() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	b := startBridge(t, cfg) // same instance id: same reverse group
	waitFor(t, 20*time.Second, "the restarted instance's horizon", func() bool {
		return b.stateEngine.ReverseHorizon() >= restarted.Add(-session.HorizonSlack).UnixMilli()
	})
}
