package bridge

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestValidateKafkaHeaders: kafka.headers names known headers only, and a
// set that breaks a promise (loop prevention, QoS, retain, expiry, No Local,
// the consumers' deduplication key, the MQTT topic under a forward rule
// with a topic) is refused with a FieldError naming the key and the reason.
func TestValidateKafkaHeaders(t *testing.T) {
	required := []string{"mqtt.qos", "mqtt.retain", "mqtt.expiry", "mqtt.client_id", "ferry.origin", "mqtt.packet_id"}
	without := func(name string) []string {
		return slices.DeleteFunc(slices.Clone(required), func(s string) bool { return s == name })
	}
	for _, tt := range []struct {
		name    string
		headers []string
		forward []topicmap.ForwardRule
		want    string // "" valid
	}{
		{"default", []string{"default"}, nil, ""},
		{"empty is default", nil, nil, ""},
		{"all", []string{"all"}, nil, ""},
		{"default plus seq", []string{"default", "ferry.seq"}, nil, ""},
		{"no mqtt.topic under default-rule names", required, nil, ""},
		{"unknown", []string{"default", "mqtt.Qos"}, nil, `unknown header "mqtt.Qos"`},
		{"no origin", append(without("ferry.origin"), "mqtt.topic"), nil, "ferry.origin is required: loop prevention"},
		{"no qos", append(without("mqtt.qos"), "mqtt.topic"), nil, "mqtt.qos is required"},
		{"no retain", append(without("mqtt.retain"), "mqtt.topic"), nil, "mqtt.retain is required"},
		{"no expiry", append(without("mqtt.expiry"), "mqtt.topic"), nil, "mqtt.expiry is required"},
		{"no client id", append(without("mqtt.client_id"), "mqtt.topic"), nil, "mqtt.client_id is required"},
		{"no dedup key", append(without("mqtt.packet_id"), "mqtt.topic"), nil, "mqtt.packet_id or ferry.seq is required"},
		{"no topic under a topic rule", required, []topicmap.ForwardRule{{Filter: "a/#", Topic: "a"}},
			`mqtt.topic is required: forward rule 0 sets topic "a"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("")
			cfg.Kafka.Headers = tt.headers
			cfg.Topics.Forward = tt.forward
			err := cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("kafka.headers %q refused: %v", tt.headers, err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Key != "kafka.headers" || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("kafka.headers %q: %v, want a FieldError for kafka.headers saying %q", tt.headers, err, tt.want)
			}
		})
	}
}

// TestLoadKafkaHeaders: the key from YAML, and from FERRY_KAFKA_HEADERS
// as a comma-separated list like the other lists.
func TestLoadKafkaHeaders(t *testing.T) {
	cfg, err := loadWith(t, "kafka:\n  headers: [default, ferry.seq]\n")
	if err != nil || !slices.Equal(cfg.Kafka.Headers, []string{"default", "ferry.seq"}) {
		t.Fatalf("yaml: %q, %v", cfg.Kafka.Headers, err)
	}
	t.Setenv("FERRY_KAFKA_HEADERS", "all, mqtt.topic")
	if cfg, err = loadWith(t, ""); err != nil || !slices.Equal(cfg.Kafka.Headers, []string{"all", "mqtt.topic"}) {
		t.Fatalf("env: %q, %v", cfg.Kafka.Headers, err)
	}
	t.Setenv("FERRY_KAFKA_HEADERS", "default,ferry.sequence")
	if _, err = loadWith(t, ""); err == nil || !strings.Contains(err.Error(), "kafka.headers") {
		t.Fatalf("env with an unknown name: %v", err)
	}
}

// TestForwardHeaderSets: the records in Kafka carry exactly the configured
// standard headers (in the documented order), then the MQTT 5 user
// properties; the key is the MQTT topic whatever the set.
func TestForwardHeaderSets(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, tt := range []struct {
		name    string
		headers []string
		want    []string
	}{
		{"default", nil, []string{"mqtt.topic", "mqtt.qos", "mqtt.client_id", "ferry.origin", "mqtt.packet_id", "mqtt.retain", "mqtt.expiry"}},
		{"all", []string{"all"}, []string{"mqtt.topic", "mqtt.qos", "mqtt.client_id", "ferry.origin", "ferry.seq", "mqtt.packet_id", "mqtt.retain", "mqtt.expiry"}},
		{"smallest", []string{"mqtt.qos", "mqtt.retain", "mqtt.expiry", "mqtt.client_id", "ferry.origin", "ferry.seq"},
			[]string{"mqtt.qos", "mqtt.client_id", "ferry.origin", "ferry.seq", "mqtt.retain", "mqtt.expiry"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(brokers)
			cfg.Kafka.Headers = tt.headers
			b := startBridge(t, cfg)
			topic := uniqueTopic("hdrset")
			c := connectV5(t, b.MQTTAddr(), "hdrset-"+randHex(3))
			mustPublish(t, c, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("x"),
				Properties: &paho.PublishProperties{MessageExpiry: ptr(uint32(600)), User: paho.UserProperties{{Key: "u", Value: "v"}}}})
			m := readTopic(t, b.KafkaBrokers(), kafkaName(t, topic), 1, 20*time.Second)[0]
			var keys []string
			for _, h := range m.Headers {
				keys = append(keys, h.Key)
			}
			if want := append(tt.want, "u"); !slices.Equal(keys, want) {
				t.Fatalf("record headers %q, want %q", keys, want)
			}
			if string(m.Key) != topic {
				t.Fatalf("key %q, want the MQTT topic %q", m.Key, topic)
			}
			for k, v := range map[string]string{"mqtt.qos": "1", "mqtt.retain": "true", "mqtt.expiry": "600", "ferry.origin": b.InstanceID()} {
				if got, _ := header(m, k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
