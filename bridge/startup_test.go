package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runLogged starts a bridge whose log goes to the returned buffer; the
// channel yields Run's result.
func runLogged(t *testing.T, cfg Config) (*Bridge, *lockedBuffer, <-chan error) {
	t.Helper()
	logs := new(lockedBuffer)
	b, err := New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- b.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	return b, logs, errc
}

// TestKafkaUnreachableSaysWhy: with a Kafka address where nothing listens,
// the first failed check is logged at once with its error, and /readyz
// carries the error (it said only "kafka unreachable", and the log said
// nothing at all: the first state was "not OK" and only changes were logged).
func TestKafkaUnreachableSaysWhy(t *testing.T) {
	cfg := testConfig("127.0.0.1:" + freePort(t)) // closed again: nothing listens
	cfg.HTTP.Listen = "127.0.0.1:0"
	b, logs, errc := runLogged(t, cfg)
	awaitReady(t, b, errc)
	// The first check runs at start and times out after 2 s at most.
	waitFor(t, 5*time.Second, "the log line saying Kafka is unreachable, with the error", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "kafka unreachable") && strings.Contains(l, "err=") {
				return true
			}
		}
		return false
	})
	code, body := readyz(t, b.HTTPAddr())
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka unreachable: ") || !strings.Contains(body, "refused") {
		t.Fatalf("/readyz = %d %q, want 503 with the connection error", code, body)
	}
}

// TestFailedStartSaysWhy: a bridge that cannot bind its MQTT port fails
// with an error that names the cause and the flag that moves it, and does
// not log "ferry bridge stopped" (it did, right before the real error).
func TestFailedStartSaysWhy(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig("")
	cfg.MQTT.Listen = busy.Addr().String()
	_, logs, errc := runLogged(t, cfg)
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("bridge.Run did not fail within 30s")
	}
	if err == nil {
		t.Fatal("bridge started on a port in use")
	}
	for _, want := range []string{"address already in use", "--mqtt-listen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error %q does not say %q", err, want)
		}
	}
	if strings.Contains(logs.String(), "ferry bridge stopped") {
		t.Errorf("a bridge that never started logged that it stopped:\n%s", logs)
	}
}

// TestEmbeddedKafkaPort: the embedded Kafka listens on the configured port
// (tools find it at a fixed address), and on another one, said in the log,
// when that port is in use.
func TestEmbeddedKafkaPort(t *testing.T) {
	port, err := strconv.Atoi(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("")
	cfg.Kafka.EmbeddedPort = port
	b := startBridge(t, cfg)
	if got, want := strings.Join(b.KafkaBrokers(), ","), fmt.Sprintf("127.0.0.1:%d", port); got != want {
		t.Fatalf("embedded Kafka on %s, want %s", got, want)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg = testConfig("")
	cfg.Kafka.EmbeddedPort = busy.Addr().(*net.TCPAddr).Port
	b, logs, errc := runLogged(t, cfg) // Run failing here: the port in use was not handled
	awaitReady(t, b, errc)
	if got := strings.Join(b.KafkaBrokers(), ","); got == busy.Addr().String() || !strings.Contains(logs.String(), "kafka.embedded_port in use") {
		t.Fatalf("port in use: embedded Kafka on %s, log:\n%s", got, logs)
	}
}
