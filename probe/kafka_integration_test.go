package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestRealKafkaAppendTime runs mqtt-to-kafka against the real Kafka of
// scripts/kafka.sh through a test forwarder that holds each message 5 ms
// before producing it to a LogAppendTime topic: the append metric must be
// available (read from the records, not faked) and never below the delay
// minus the 1 ms truncation of LogAppendTime.
func TestRealKafkaAppendTime(t *testing.T) {
	brokers := kafkatest.Addrs(kafkatest.Brokers(t))
	topic := kafkatest.Topic(t, "probe-lat")
	kafkatest.CreateTopic(t, strings.Join(brokers, ","), topic, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	b := startBroker(t)
	forwardMQTTToKafka(t, b, brokers, "/probe/lat", topic, 5*time.Millisecond, passThrough)
	cfg := testConfig(MQTTToKafka, b, brokers)
	cfg.KafkaTopic = topic
	cfg.Topic = "/probe/lat"
	cfg.Count, cfg.Warmup, cfg.Rate = 200, 20, 200
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, MQTTToKafka, cfg, Env{})
	if err != nil {
		t.Fatal(err)
	}
	app, e2e := row(t, res, MetricAppend), row(t, res, MetricE2E)
	if !app.Available || app.Figures.Count != 200 {
		t.Fatalf("append row %+v\nchecks %v", app, res.Checks)
	}
	if app.Counts.Lost() != 0 || e2e.Counts.Received != 200 {
		t.Fatalf("counts %+v", e2e.Counts)
	}
	if app.Figures.Min < 4 || e2e.Figures.Min < 5 {
		t.Fatalf("below the injected 5 ms: append min %.3f, e2e min %.3f", app.Figures.Min, e2e.Figures.Min)
	}
	// Appending happens before consuming: allow the 1 ms truncation.
	if app.Figures.P50 > e2e.Figures.P50+1 {
		t.Fatalf("append p50 %.3f > e2e p50 %.3f", app.Figures.P50, e2e.Figures.P50)
	}
	checks := strings.Join(res.Checks, "\n")
	if !strings.Contains(checks, "config LogAppendTime; records: LogAppendTime on all 220 records") {
		t.Fatalf("self-check:\n%s", checks)
	}
}
