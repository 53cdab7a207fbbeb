package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// testLogger is the bridge's logger in tests (testhelp.Logger): quiet
// unless FERRY_TEST_LOG is set; a failing test shows its warnings.
func testLogger(t testing.TB) *slog.Logger { return testhelp.Logger(t) }

// testConfig is a bridge config on loopback port 0 with no HTTP server.
func testConfig(brokers string) Config {
	cfg := DefaultConfig()
	cfg.Instance.ID = "test-" + randHex(4)
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.HTTP.Listen = ""
	cfg.Kafka.EmbeddedPort = 0
	cfg.Kafka.AckTimeout = 5 * time.Second
	// Each bridge its own state topics: retained messages and sessions of
	// other tests sharing the real Kafka must not leak in.
	tag := randHex(4)
	cfg.State.SessionsTopic, cfg.State.RetainedTopic, cfg.State.Partitions = "_ferry_sessions_"+tag, "_ferry_retained_"+tag, 1
	if brokers != "" {
		cfg.Kafka.Brokers = strings.Split(brokers, ",")
	}
	return cfg
}

// stateEnv names state topics of the test's own for bridge processes
// (cmd/bridge or the test binary as a child): every process of one test
// shares them, other tests do not see them. A test run again (go test
// -count N) gets new ones: its processes find none of the previous run's
// sessions.
func stateEnv(t testing.TB) []string {
	v, ok := stateTags.Load(t)
	if !ok {
		v, _ = stateTags.LoadOrStore(t, randHex(4))
		t.Cleanup(func() { stateTags.Delete(t) })
	}
	tag := v.(string)
	return []string{"FERRY_STATE_SESSIONS_TOPIC=_ferry_sessions_" + tag, "FERRY_STATE_RETAINED_TOPIC=_ferry_retained_" + tag,
		"FERRY_STATE_PARTITIONS=1"}
}

// stateTags holds each running test's state topic tag (stateEnv).
var stateTags sync.Map

// useStateEnv gives an in-process bridge's config the state topics of
// stateEnv, shared with the test's bridge processes.
func useStateEnv(t testing.TB, cfg *Config) {
	for _, kv := range stateEnv(t) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "FERRY_STATE_SESSIONS_TOPIC":
			cfg.State.SessionsTopic = v
		case "FERRY_STATE_RETAINED_TOPIC":
			cfg.State.RetainedTopic = v
		}
	}
}

// startBridge runs a bridge until the test ends; each of before may set its
// internals between New and Run.
func startBridge(t testing.TB, cfg Config, before ...func(*Bridge)) *Bridge {
	t.Helper()
	reg := prometheus.NewRegistry()
	b, err := New(cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("bridge.New: %v", err)
	}
	for _, f := range before { // internals a test sets before Run
		f(b)
	}
	errc := make(chan error, 1)
	go func() { errc <- b.Run(context.Background()) }()
	awaitReady(t, b, errc)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("bridge.Close: %v", err)
		}
	})
	return b
}

// awaitReady waits until b is ready; Run's error (on errc) or 30 s fail t.
func awaitReady(t testing.TB, b *Bridge, errc <-chan error) {
	t.Helper()
	select {
	case <-b.Ready():
	case err := <-errc:
		t.Fatalf("bridge.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("bridge not ready within 30s")
	}
}

func randHex(n int) string { return testhelp.RandHex(n) }

// uniqueTopic returns an MQTT topic whose default Kafka mapping is fresh.
func uniqueTopic(prefix string) string {
	return "/ferrytest/" + prefix + randHex(6) + "/lf"
}

// kafkaName maps with the default rule ('/' -> '_').
func kafkaName(t testing.TB, mqttTopic string) string {
	t.Helper()
	return strings.ReplaceAll(mqttTopic, "/", "_")
}

// connectPaho connects an MQTT 3.1.1 client (Eclipse Paho Go).
func connectPaho(t testing.TB, addr, id string, opts ...func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(false).
		SetConnectTimeout(5 * time.Second).SetWriteTimeout(10 * time.Second)
	for _, f := range opts {
		f(o)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho connect %s: %v", addr, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// readTopic reads n records of a one-partition topic from offset 0.
func readTopic(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0,
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]kafka.Message, 0, n)
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading %s: got %d of %d records: %v", topic, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// topicConfig reads one config value of a topic.
func topicConfig(t testing.TB, brokers []string, topic, name string) string {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	res, err := c.DescribeConfigs(context.Background(), &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{name}}},
	})
	if err != nil {
		t.Fatalf("describe configs %s: %v", topic, err)
	}
	for _, r := range res.Resources {
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				return e.ConfigValue
			}
		}
	}
	t.Fatalf("topic %s has no config %s", topic, name)
	return ""
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testhelp.WaitFor(t, timeout, what, cond)
}

// waitAcked waits until b's session of client id has nothing in flight:
// b has every acknowledgement of what it delivered. Paho (v3) sends a PUBACK
// after its message handler returns and Disconnect does not wait for it, so
// a persistent session that leaves at once may leave a delivery
// unacknowledged, which a resume then rightly redelivers (at least once).
// A test whose later step counts exact deliveries calls this before the
// client leaves.
func waitAcked(t testing.TB, b *Bridge, id string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the instance has the client's acknowledgements", func() bool {
		cl, ok := b.server.Clients.Get(id)
		return ok && cl.State.Inflight.Len() == 0
	})
}

// rawConn is a plain TCP connection for malformed-input tests.
func rawConn(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var _ = io.Discard
var _ = fmt.Sprintf

// sessionOffline reports whether b has seen the client of the persistent
// session id go: no live connection of id here, and b's record of the
// session says disconnected (an offline session is its record: the broker
// keeps no client for it).
func sessionOffline(b *Bridge, id string) bool {
	if cl, ok := b.server.Clients.Get(id); ok && !cl.Closed() {
		return false
	}
	rec := b.stateEngine.Lookup(id)
	return rec != nil && !rec.Connected
}
