package kafkawatch

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestKafkaWatchRateLimited: a lasting outage is logged at once, then at
// most every stillDownEvery with the error and how long it lasts; a
// recovery once.
func TestKafkaWatchRateLimited(t *testing.T) {
	logs := new(bytes.Buffer)
	w := New(slog.New(slog.NewTextHandler(logs, nil)), []string{"k:9092"})
	if ok, why := w.Status(); ok || why != "kafka not checked yet" {
		t.Fatalf("before the first check: %v %q", ok, why)
	}
	t0 := time.Unix(1000, 0)
	down := errors.New("dial tcp k:9092: connection refused")
	lines := func() int { return strings.Count(logs.String(), "\n") }
	w.observe(t0, down)
	if lines() != 1 || !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("first failure not logged at once with its error:\n%s", logs)
	}
	for s := 1; s < 30; s++ {
		w.observe(t0.Add(time.Duration(s)*time.Second), down)
	}
	if lines() != 1 {
		t.Fatalf("logged %d lines within 30 s of one outage, want 1:\n%s", lines(), logs)
	}
	w.observe(t0.Add(30*time.Second), down)
	if lines() != 2 || !strings.Contains(logs.String(), "kafka still unreachable") || !strings.Contains(logs.String(), "for=30s") {
		t.Fatalf("the outage not repeated after 30 s:\n%s", logs)
	}
	if ok, why := w.Status(); ok || why != "kafka unreachable: "+down.Error() {
		t.Fatalf("status while down: %v %q", ok, why)
	}
	w.observe(t0.Add(31*time.Second), nil)
	w.observe(t0.Add(32*time.Second), nil)
	if lines() != 3 || !strings.Contains(logs.String(), "kafka reachable") {
		t.Fatalf("recovery not logged once:\n%s", logs)
	}
	if ok, why := w.Status(); !ok || why != "ok" {
		t.Fatalf("status after recovery: %v %q", ok, why)
	}
}
