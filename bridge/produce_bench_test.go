package bridge

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
)

// BenchmarkProduce measures the MQTT -> Kafka produce path of a whole
// bridge: a Paho client publishes QoS 1 messages, pipelined up to a window,
// and each PUBACK arrives only after Kafka acknowledged the record (acks=all),
// so ns/op is the bridge's per-message cost at saturation and msgs/s its
// throughput. Kafka is the real broker of FERRY_TEST_KAFKA when set (what
// scripts/benchstat.sh uses), else the embedded in-memory kfake cluster,
// which measures the bridge with a near-free Kafka.
//
//	go test -run '^$' -bench Produce -count 5 ./bridge/
func BenchmarkProduce(b *testing.B) {
	brokers := os.Getenv("FERRY_TEST_KAFKA")
	kafkaKind := "kfake"
	if brokers != "" {
		kafkaKind = "kafka"
	}
	for _, payload := range []int{12, 1024} {
		for _, window := range []int{1, 256} {
			name := fmt.Sprintf("kafka=%s/payload=%d/window=%d", kafkaKind, payload, window)
			b.Run(name, func(b *testing.B) { benchProduce(b, brokers, payload, window) })
		}
	}
}

func benchProduce(b *testing.B, brokers string, payload, window int) {
	br := startBridge(b, testConfig(brokers))
	topic := uniqueTopic("bench")
	c := connectPaho(b, br.MQTTAddr(), "bench-pub-"+randHex(3))
	msg := []byte(strings.Repeat("x", payload))
	// The first publish creates the Kafka topic: keep it out of the timing.
	if tok := c.Publish(topic, 1, false, msg); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("warm-up publish: %v", tok.Error())
	}
	inflight := make(chan pahov3.Token, window)
	wait := func(tok pahov3.Token) {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			b.Fatalf("publish: no PUBACK within 30s: %v", tok.Error())
		}
	}
	b.SetBytes(int64(payload))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if len(inflight) == window {
			wait(<-inflight)
		}
		inflight <- c.Publish(topic, 1, false, msg)
	}
	for len(inflight) > 0 {
		wait(<-inflight)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
