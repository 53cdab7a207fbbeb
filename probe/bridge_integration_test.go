package probe_test

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/bridge"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/probe"
	"github.com/ferry-bridge/ferry/topicmap"
)

// startBridge runs a bridge on 127.0.0.1:0 against brokers and returns its
// MQTT URL.
func startBridge(t *testing.T, brokers []string, mod func(*bridge.Config)) string {
	t.Helper()
	cfg := bridge.DefaultConfig()
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.HTTP.Listen = ""
	cfg.Kafka.Brokers = brokers
	if mod != nil {
		mod(&cfg)
	}
	b, err := bridge.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-runErr:
		cancel()
		t.Fatalf("bridge: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("bridge not ready after 30s")
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer ccancel()
		if err := b.Close(cctx); err != nil {
			t.Errorf("bridge close: %v", err)
		}
		cancel()
	})
	return "tcp://" + b.MQTTAddr()
}

// uniqueTopic returns an MQTT topic unique to this test and its Kafka name
// under the default mapping; the Kafka topic is deleted at the end.
func uniqueTopic(t *testing.T, brokers []string, prefix string) (string, string) {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	mqttTopic := "/" + prefix + "/" + hex.EncodeToString(b[:])
	kafkaTopic, err := topicmap.EncodeTopic(mqttTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, kafkaTopic)
	})
	return mqttTopic, kafkaTopic
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

const csvContract = "direction,metric,count,lost,duplicated,reordered,throughput_msg_s,min_ms,avg_ms,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,qos,payload_bytes,rate,clients"

// checkRun asserts a QoS 1 run delivered everything and wrote the contract
// CSV.
func checkRun(t *testing.T, res *probe.Result, count int64, metrics ...string) {
	t.Helper()
	if len(res.Rows) != len(metrics) {
		t.Fatalf("rows %+v, want metrics %v", res.Rows, metrics)
	}
	for i, r := range res.Rows {
		if r.Metric != metrics[i] || !r.Available || r.Counts.Received != count || r.Counts.Lost() != 0 {
			t.Fatalf("row %s: %+v\nchecks: %v", metrics[i], r, res.Checks)
		}
	}
	path := filepath.Join(t.TempDir(), "out.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.WriteCSV(f, res.Rows); err != nil {
		t.Fatal(err)
	}
	f.Close()
	recs := readCSV(t, path)
	if len(recs) != 1+len(metrics) || strings.Join(recs[0][:19], ",") != csvContract {
		t.Fatalf("csv %v", recs)
	}
	t.Logf("%s", strings.Join(res.Checks, "\n"))
	for _, r := range res.Rows {
		f := r.Figures
		t.Logf("%s %s: count %d avg %.3f p50 %.3f p90 %.3f p99 %.3f max %.3f ms", r.Direction, r.Metric,
			r.Counts.Received, f.Avg, f.P50, f.P90, f.P99, f.Max)
	}
}

func TestBridgeMQTTToKafka(t *testing.T) {
	brokers := kafkatest.Addrs(kafkatest.Brokers(t))
	url := startBridge(t, brokers, nil)
	mqttTopic, kafkaTopic := uniqueTopic(t, brokers, "probe")
	cfg := probe.DefaultConfig(probe.MQTTToKafka)
	cfg.MQTT, cfg.Kafka, cfg.Topic = url, brokers, mqttTopic
	cfg.Count, cfg.Warmup, cfg.QoS, cfg.Rate, cfg.Clients = 500, 50, 1, 500, 2
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := probe.Run(ctx, probe.MQTTToKafka, cfg, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if res.KafkaTopic != kafkaTopic {
		t.Fatalf("kafka topic %q, want the bridge's mapping %q", res.KafkaTopic, kafkaTopic)
	}
	// The bridge creates its topics with LogAppendTime: append is measured.
	checkRun(t, res, 500, probe.MetricAppend, probe.MetricE2E)
}
