package bridge

import (
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestScaleOutThroughKafka: instances A and B bridge the same topic both
// ways and share nothing but Kafka. A publisher on A reaches a subscriber on
// A (locally) and one on B (through Kafka), each message exactly once and in
// order. A sentinel published last proves no duplicate is still on its way.
func TestScaleOutThroughKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	n := scaled(10000, 2000)
	m := "/ferrytest/so" + randHex(5) + "/le"
	k, err := topicmap.EncodeTopic(m)
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := func() Config {
		c := testConfig(brokers)
		// Order and exactly-once are the subject, not latency: up to 1,024
		// pipelined QoS 1 publishes in flight under -race on a loaded
		// machine may take longer than testConfig's 5 s ack timeout.
		c.Kafka.AckTimeout = 60 * time.Second
		c.Reverse.Topics = []string{k}
		c.Reverse.StartOffset = "earliest"
		return c
	}
	a := startBridge(t, cfg())
	b := startBridge(t, cfg())
	colA, colB := &collector{}, &collector{}
	subscribePaho(t, a.MQTTAddr(), "so-sub-a-"+randHex(3), m, true, colA)
	subscribePaho(t, b.MQTTAddr(), "so-sub-b-"+randHex(3), m, true, colB)
	pub := connectPaho(t, a.MQTTAddr(), "so-pub-"+randHex(3))

	start := time.Now()
	publishN(t, pub, m, 0, n)
	for deadline := time.Now().Add(120 * time.Second); colA.len() < n || colB.len() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("2 min after the last PUBACK, A's subscriber has %d messages and B's %d, want %d each", colA.len(), colB.len(), n)
		}
	}
	took := time.Since(start)
	publishN(t, pub, m, n, 1) // sentinel
	waitFor(t, 30*time.Second, "sentinel on both", func() bool { return colA.len() >= n+1 && colB.len() >= n+1 })

	checkSeqOrder(t, "subscriber on A (local)", colA.snapshot(), n+1)
	checkSeqOrder(t, "subscriber on B (through Kafka)", colB.snapshot(), n+1)
	// B's subscriber having the sentinel says Kafka has it, not that A's
	// reverse path has read it yet (A's subscriber got it locally): wait
	// for A to count it, then hold it to exactly n+1.
	ownSkipped := func() float64 {
		return metricValue(t, a, "ferry_reverse_skipped_total", map[string]string{"reason": "own_origin"})
	}
	waitFor(t, 30*time.Second, "A's reverse path to read its own sentinel", func() bool { return ownSkipped() >= float64(n+1) })
	if got := ownSkipped(); got != float64(n+1) {
		t.Errorf("A skipped %v own records, want %d", got, n+1)
	}
	if got := metricValue(t, a, "ferry_reverse_published_total", nil); got != 0 {
		t.Errorf("A republished %v records, want 0", got)
	}
	if got := metricValue(t, b, "ferry_reverse_published_total", nil); got != float64(n+1) {
		t.Errorf("B published %v records, want %d", got, n+1)
	}
	if got := kafkatest.RecordCount(t, brokers, k); got != int64(n+1) {
		t.Errorf("Kafka holds %d records, want %d", got, n+1)
	}
	t.Logf("scale-out: %d QoS1 messages published on A: A's subscriber %d, B's subscriber %d, each exactly once, in order; %s (%.0f msg/s)",
		n+1, colA.len(), colB.len(), took.Round(time.Millisecond), float64(n)/took.Seconds())
}
