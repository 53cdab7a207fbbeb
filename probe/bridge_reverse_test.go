package probe_test

// Integration tests of the bridge's reverse path (Kafka -> MQTT) against the
// real Kafka of scripts/kafka.sh.

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/bridge"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/probe"
)

func TestBridgeKafkaToMQTT(t *testing.T) {
	brokers := kafkatest.Addrs(kafkatest.Brokers(t))
	mqttTopic, kafkaTopic := uniqueTopic(t, brokers, "probesub")
	kafkatest.CreateTopic(t, kafkatest.Brokers(t), kafkaTopic, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	url := startBridge(t, brokers, func(c *bridge.Config) {
		c.Reverse.Topics = []string{kafkaTopic}
		c.Reverse.StartOffset = "earliest"
	})
	cfg := probe.DefaultConfig(probe.KafkaToMQTT)
	cfg.MQTT, cfg.Kafka, cfg.Topic = url, brokers, mqttTopic
	cfg.Count, cfg.Warmup, cfg.QoS, cfg.Rate = 500, 50, 1, 500
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := probe.Run(ctx, probe.KafkaToMQTT, cfg, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, 500, probe.MetricE2E)
}

// TestBridgeRoundtrip publishes on instance A and subscribes on instance B:
// the messages reach B only through Kafka (MQTT -> Kafka -> MQTT).
func TestBridgeRoundtrip(t *testing.T) {
	brokers := kafkatest.Addrs(kafkatest.Brokers(t))
	mqttTopic, kafkaTopic := uniqueTopic(t, brokers, "proberound")
	kafkatest.CreateTopic(t, kafkatest.Brokers(t), kafkaTopic, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	instance := func(id string) func(*bridge.Config) {
		return func(c *bridge.Config) {
			c.Instance.ID = id
			c.Reverse.Topics = []string{kafkaTopic}
			c.Reverse.StartOffset = "earliest"
		}
	}
	urlA := startBridge(t, brokers, instance("probe-a"))
	urlB := startBridge(t, brokers, instance("probe-b"))
	cfg := probe.DefaultConfig(probe.Roundtrip)
	cfg.MQTT, cfg.ReplyMQTT, cfg.Topic = urlA, urlB, mqttTopic
	cfg.Count, cfg.Warmup, cfg.QoS, cfg.Rate = 500, 50, 1, 500
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := probe.Run(ctx, probe.Roundtrip, cfg, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, 500, probe.MetricE2E)
}
