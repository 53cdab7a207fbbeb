package bridge

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// loadWith runs LoadConfig like cmd/bridge does: args parsed by the contract
// flags, the file (if any) written to a temp dir, env from the process.
func loadWith(t *testing.T, yaml string, args ...string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("bridge", pflag.ContinueOnError)
	f := BindFlags(fs)
	if yaml != "" {
		path := filepath.Join(t.TempDir(), "ferry.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return LoadConfig(fs, f, os.LookupEnv)
}

func TestLoadConfigUnknownKey(t *testing.T) {
	tests := []struct{ name, yaml, key string }{
		{"top level", "mqt:\n  listen: 127.0.0.1:1883\n", "mqt"},
		{"nested", "kafka:\n  brokrs: [127.0.0.1:9092]\n", "brokrs"},
		{"deep", "kafka:\n  sasl:\n    mechanizm: PLAIN\n", "mechanizm"},
		{"in a list", "mqtt:\n  users:\n    - username: a\n      pasword: b\n", "pasword"},
		{"in a rule", "topics:\n  forward:\n    - filter: a/#\n      topik: x\n", "topik"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWith(t, tt.yaml)
			if err == nil {
				t.Fatalf("unknown key %q accepted", tt.key)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("error %q does not name the unknown key %q", err, tt.key)
			}
		})
	}
}

func TestLoadConfigBadValueNamesKeyAndValue(t *testing.T) {
	tests := []struct{ yaml, key, value string }{
		{"kafka:\n  acks: most\n", "kafka.acks", "most"},
		{"kafka:\n  compression: brotli\n", "kafka.compression", "brotli"},
		{"ring:\n  capacity: 1000\n", "ring.capacity", "1000"},
		{"mqtt:\n  listen: nonsense\n", "mqtt.listen", "nonsense"},
		{"log:\n  level: loud\n", "log.level", "loud"},
		{"runtime:\n  gc_percent: 5\n", "runtime.gc_percent", "5"},
		{"mqtt:\n  max_topic_levels: 0\n", "mqtt.max_topic_levels", "0"},
		{"mqtt:\n  max_topic_length: 70000\n", "mqtt.max_topic_length", "70000"},
		{"reverse:\n  topics: [\"/([/\"]\n", "reverse.topics[0]", "/([/"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			_, err := loadWith(t, tt.yaml)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *FieldError", err)
			}
			if fe.Key != tt.key || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), tt.value) {
				t.Fatalf("error %q (key %q): want key %q and value %q named", err, fe.Key, tt.key, tt.value)
			}
		})
	}
	// A wrongly typed value is reported with its key too.
	if _, err := loadWith(t, "kafka:\n  max_batch: lots\n"); err == nil || !strings.Contains(err.Error(), "max_batch") {
		t.Fatalf("max_batch: lots: got %v, want an error naming max_batch", err)
	}
}

func TestLoadConfigEnvLists(t *testing.T) {
	t.Setenv("FERRY_KAFKA_BROKERS", "127.0.0.1:9092, 127.0.0.2:9092,,")
	t.Setenv("FERRY_REVERSE_TOPICS", "commands,/^fleet\\..*$/")
	t.Setenv("FERRY_MQTT_LISTEN", "127.0.0.1:1999")
	t.Setenv("FERRY_HTTP_LISTEN", "127.0.0.1:8999")
	cfg, err := loadWith(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:9092", "127.0.0.2:9092"}; !slices.Equal(cfg.Kafka.Brokers, want) {
		t.Errorf("kafka.brokers = %q, want %q", cfg.Kafka.Brokers, want)
	}
	if want := []string{"commands", `/^fleet\..*$/`}; !slices.Equal(cfg.Reverse.Topics, want) {
		t.Errorf("reverse.topics = %q, want %q", cfg.Reverse.Topics, want)
	}
	if cfg.MQTT.Listen != "127.0.0.1:1999" || cfg.HTTP.Listen != "127.0.0.1:8999" {
		t.Errorf("mqtt.listen = %q, http.listen = %q from the environment", cfg.MQTT.Listen, cfg.HTTP.Listen)
	}
}

// TestLoadConfigPrecedence: defaults < file < FERRY_* env < flags.
func TestLoadConfigPrecedence(t *testing.T) {
	const file = "mqtt:\n  listen: 127.0.0.1:1001\nhttp:\n  listen: 127.0.0.1:2001\nkafka:\n  brokers: [127.0.0.1:3001]\n  acks: one\n"
	cfg, err := loadWith(t, file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MQTT.Listen != "127.0.0.1:1001" || cfg.Kafka.Acks != "one" || cfg.Kafka.MaxBatch != DefaultConfig().Kafka.MaxBatch {
		t.Fatalf("file over defaults: %+v", cfg)
	}

	t.Setenv("FERRY_MQTT_LISTEN", "127.0.0.1:1002")
	t.Setenv("FERRY_KAFKA_BROKERS", "127.0.0.1:3002")
	cfg, err = loadWith(t, file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MQTT.Listen != "127.0.0.1:1002" || !slices.Equal(cfg.Kafka.Brokers, []string{"127.0.0.1:3002"}) || cfg.HTTP.Listen != "127.0.0.1:2001" {
		t.Fatalf("env over file: mqtt.listen %q, kafka.brokers %q, http.listen %q", cfg.MQTT.Listen, cfg.Kafka.Brokers, cfg.HTTP.Listen)
	}

	cfg, err = loadWith(t, file, "--mqtt-listen", "127.0.0.1:1003", "--kafka", "127.0.0.1:3003,127.0.0.1:3004", "--http-listen", "127.0.0.1:2003")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MQTT.Listen != "127.0.0.1:1003" || cfg.HTTP.Listen != "127.0.0.1:2003" ||
		!slices.Equal(cfg.Kafka.Brokers, []string{"127.0.0.1:3003", "127.0.0.1:3004"}) {
		t.Fatalf("flags over env: mqtt.listen %q, kafka.brokers %q, http.listen %q", cfg.MQTT.Listen, cfg.Kafka.Brokers, cfg.HTTP.Listen)
	}
}

// TestNonLoopbackNeedsAuth: a listener on a non-loopback address with no
// users refuses, naming the key and the explicit opt-out.
func TestNonLoopbackNeedsAuth(t *testing.T) {
	for _, key := range []string{"mqtt.listen", "mqtt.ws_listen", "mqtt.tls_listen"} {
		t.Run(key, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MQTT.TLS.Cert, cfg.MQTT.TLS.Key = "server.pem", "server-key.pem"
			switch key {
			case "mqtt.listen":
				cfg.MQTT.Listen = "0.0.0.0:1883"
			case "mqtt.ws_listen":
				cfg.MQTT.WSListen = ":1882"
			case "mqtt.tls_listen":
				cfg.MQTT.TLSListen = "192.0.2.1:8883"
			}
			err := cfg.Validate()
			if err == nil {
				t.Fatal("non-loopback listener without auth accepted")
			}
			if !strings.Contains(err.Error(), "allow_anonymous: true") || !strings.Contains(err.Error(), key) {
				t.Fatalf("error %q does not name %s and `allow_anonymous: true`", err, key)
			}
			if _, err := New(cfg, nil, nil); err == nil {
				t.Fatal("New accepted a non-loopback listener without auth")
			}

			open := cfg
			open.MQTT.AllowAnonymous = true
			if err := open.Validate(); err != nil {
				t.Fatalf("with allow_anonymous: true: %v", err)
			}
			auth := cfg
			auth.MQTT.Users = []User{{Username: "u", Password: "p"}}
			if err := auth.Validate(); err != nil {
				t.Fatalf("with users: %v", err)
			}
		})
	}
	for _, addr := range []string{"127.0.0.1:1883", "[::1]:1883", "localhost:1883"} {
		cfg := DefaultConfig()
		cfg.MQTT.Listen = addr
		if err := cfg.Validate(); err != nil {
			t.Errorf("loopback %s without auth refused: %v", addr, err)
		}
	}
	// Through the contract flag, as an operator would hit it.
	_, err := loadWith(t, "", "--mqtt-listen", "0.0.0.0:1883")
	if err == nil || !strings.Contains(err.Error(), "allow_anonymous: true") {
		t.Fatalf("--mqtt-listen 0.0.0.0:1883: got %v, want the allow_anonymous hint", err)
	}
}

// TestLoadConfigHeaderCase: header names in forward rules keep their case
// (viper alone would lowercase map keys).
func TestLoadConfigHeaderCase(t *testing.T) {
	cfg, err := loadWith(t, "topics:\n  forward:\n    - filter: site/+/x\n      topic: site-x\n      headers:\n        Site-Name: HQ\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Topics.Forward[0].Headers; got["Site-Name"] != "HQ" || len(got) != 1 {
		t.Fatalf("headers = %v, want map[Site-Name:HQ]", got)
	}
}

// kafka.acks none is refused, naming the key and why; one starts with a
// warning that says what it weakens; all starts without it.
func TestAcksNoneRefusedOneWarns(t *testing.T) {
	cfg := testConfig("")
	cfg.Kafka.Acks = "none"
	err := cfg.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Key != "kafka.acks" || fe.Value != "none" || !strings.Contains(fe.Reason, "PUBACK") {
		t.Fatalf("Validate with kafka.acks=none: %v, want a FieldError for kafka.acks saying a PUBACK would promise nothing", err)
	}
	for _, acks := range []string{"one", "all"} {
		cfg := testConfig("") // embedded Kafka
		cfg.Kafka.Acks = acks
		h := &countingHandler{}
		b, err := New(cfg, slog.New(h), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("acks=%s: %v", acks, err)
		}
		errc := make(chan error, 1)
		go func() { errc <- b.Run(context.Background()) }()
		select {
		case <-b.Ready():
		case err := <-errc:
			t.Fatalf("acks=%s: run: %v", acks, err)
		case <-time.After(30 * time.Second):
			t.Fatal("not ready within 30s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := b.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		cancel()
		warned := false
		for _, m := range h.snapshot() {
			if strings.HasPrefix(m, "WARN kafka.acks=one") && strings.Contains(m, "leader") {
				warned = true
			}
		}
		if warned != (acks == "one") {
			t.Fatalf("acks=%s: warning logged = %v; logs: %q", acks, warned, h.snapshot())
		}
	}
}

// TestReplicationFactorValues: kafka.replication_factor defaults to -1
// (the cluster's default.replication.factor), takes -1 and 1..32767 from a
// file, and refuses anything else with an error naming the key.
func TestReplicationFactorValues(t *testing.T) {
	if rf := DefaultConfig().Kafka.ReplicationFactor; rf != -1 {
		t.Fatalf("default kafka.replication_factor = %d, want -1 (the cluster's default)", rf)
	}
	for _, rf := range []string{"-1", "1", "3", "32767"} {
		cfg, err := loadWith(t, "kafka:\n  replication_factor: "+rf+"\n")
		if err != nil {
			t.Fatalf("replication_factor %s: %v", rf, err)
		}
		if got := cfg.Kafka.ReplicationFactor; strconv.Itoa(got) != rf {
			t.Fatalf("replication_factor %s loaded as %d", rf, got)
		}
	}
	for _, rf := range []string{"0", "-2", "32768"} {
		_, err := loadWith(t, "kafka:\n  replication_factor: "+rf+"\n")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != "kafka.replication_factor" || !strings.Contains(err.Error(), rf) || !strings.Contains(fe.Reason, "-1") {
			t.Fatalf("replication_factor %s: got %v, want a FieldError for kafka.replication_factor naming the value and -1", rf, err)
		}
	}
}

// TestValidateInstanceLapse: the lapse must exceed two heartbeats.
func TestValidateInstanceLapse(t *testing.T) {
	cfg := DefaultConfig()
	cfg.State.HeartbeatInterval, cfg.State.InstanceLapse = time.Second, 2*time.Second
	var fe *FieldError
	if err := cfg.Validate(); !errors.As(err, &fe) || fe.Key != "state.instance_lapse" {
		t.Fatalf("Validate with a lapse of 2 heartbeats: %v, want a FieldError for state.instance_lapse", err)
	}
	cfg.State.InstanceLapse = 3 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with a lapse of 3 heartbeats: %v", err)
	}
}
