package probe_test

// Integration tests of the bridge's reverse path (Kafka -> MQTT) against the
// real Kafka of scripts/kafka.sh.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
	checkRun(t, res, 500, probe.MetricKafka, probe.MetricBridge, probe.MetricE2E)
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

// TestBridgeKafkaToMQTTMissingTopic: kafka-to-mqtt against a bridge whose
// reverse topic does not exist yet works with no extra setting: the probe
// creates the topic (LogAppendTime, as the bridge does), says so, and every
// record reaches the subscriber.
func TestBridgeKafkaToMQTTMissingTopic(t *testing.T) {
	brokers := kafkatest.Addrs(kafkatest.Brokers(t))
	mqttTopic, kafkaTopic := uniqueTopic(t, brokers, "probemissing")
	url := startBridge(t, brokers, func(c *bridge.Config) {
		c.Reverse.Topics = []string{kafkaTopic}
		c.Reverse.StartOffset = "earliest"
	})
	cfg := probe.DefaultConfig(probe.KafkaToMQTT)
	cfg.MQTT, cfg.Kafka, cfg.Topic = url, brokers, mqttTopic
	cfg.Count, cfg.Warmup, cfg.QoS, cfg.Rate = 300, 20, 1, 300
	cfg.Timeout = 60 * time.Second // the bridge finds the new topic at its next metadata refresh
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := probe.Run(ctx, probe.KafkaToMQTT, cfg, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res, 300, probe.MetricKafka, probe.MetricBridge, probe.MetricE2E)
	if !strings.Contains(strings.Join(res.Checks, "\n"), "created by the probe") {
		t.Fatalf("the probe did not say it created the topic:\n%s", strings.Join(res.Checks, "\n"))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, kafkaTopic)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rcs.On(kafkaTopic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Configs {
		if c.Key == "message.timestamp.type" && (c.Value == nil || *c.Value != "LogAppendTime") {
			t.Fatalf("created topic has message.timestamp.type %v", c.Value)
		}
	}
}
