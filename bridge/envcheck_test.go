package bridge

import (
	"strings"
	"testing"
)

// TestUnknownEnvRefused: a misspelt FERRY_* variable is refused by name,
// with the key it probably meant (it was silently ignored); Kubernetes
// service links, the test harness's variables and empty ones pass.
func TestUnknownEnvRefused(t *testing.T) {
	t.Setenv("FERRY_KAFKA_ACK", "all")
	_, err := loadWith(t, "")
	if err == nil {
		t.Fatal("FERRY_KAFKA_ACK=all accepted")
	}
	if !strings.Contains(err.Error(), "FERRY_KAFKA_ACK ") || !strings.Contains(err.Error(), "did you mean FERRY_KAFKA_ACKS?") {
		t.Fatalf("error %q does not name the variable and the key it meant", err)
	}
	if strings.Contains(err.Error(), "=all") {
		t.Fatalf("error %q shows the value (it may be a secret)", err)
	}
}

func TestEnvAllowed(t *testing.T) {
	for _, name := range []string{
		"FERRY_PORT", "FERRY_PORT_1883_TCP", "FERRY_PORT_1883_TCP_ADDR", "FERRY_SERVICE_HOST",
		"FERRY_MQTT_SERVICE_HOST", "FERRY_MQTT_SERVICE_PORT", "FERRY_MQTT_SERVICE_PORT_MQTT",
		"FERRY_MQTT_PORT", "FERRY_MQTT_PORT_8883_TCP_PROTO", "FERRY_METRICS_PORT_8080_TCP_PORT",
		"FERRY_HEADLESS_SERVICE_HOST", "FERRY_TEST_SOMETHING",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, "tcp://10.0.0.1:1883")
			if _, err := loadWith(t, ""); err != nil {
				t.Fatalf("%s refused: %v", name, err)
			}
		})
	}
	t.Setenv("FERRY_KAFKA_ACK", "") // empty: ignored, as viper ignores it
	t.Setenv("FERRY_KAFKA_ACKS", "one")
	t.Setenv("FERRY_REVERSE_TOPICS", "a,b")
	cfg, err := loadWith(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Acks != "one" {
		t.Fatalf("FERRY_KAFKA_ACKS=one gave %q", cfg.Kafka.Acks)
	}
}

// TestSASLNeedsPassword: a SASL mechanism with a username and no password
// is refused by Validate (it passed, and failed only at Kafka).
func TestSASLNeedsPassword(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Kafka.SASL.Mechanism = "SCRAM-SHA-512"
	cfg.Kafka.SASL.Username = "ferry"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "config kafka.sasl.password=\"\"") {
		t.Fatalf("Validate = %v, want kafka.sasl.password refused", err)
	}
	cfg.Kafka.SASL.Password = "secret"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestReverseTopicsFlag: --reverse-topics sets reverse.topics (a list),
// over FERRY_REVERSE_TOPICS.
func TestReverseTopicsFlag(t *testing.T) {
	t.Setenv("FERRY_REVERSE_TOPICS", "x")
	cfg, err := loadWith(t, "", "--reverse-topics", "_a,/^b.*$/")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Reverse.Topics, " ") != "_a /^b.*$/" {
		t.Fatalf("reverse.topics = %q", cfg.Reverse.Topics)
	}
}
