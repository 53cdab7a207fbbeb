package probe

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func needLink(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("link emulation needs root (network namespace and TUN devices)")
	}
}

// TestLinkDelay puts publisher and subscriber behind a link with 40 ms
// one-way delay: each message crosses it twice (publisher -> broker ->
// subscriber), so every sample is at least 80 ms and the fastest within
// 10% of it. (The median's distance above 80 ms is the loaded machine's,
// not the link's: logged, not bounded.)
func TestLinkDelay(t *testing.T) {
	needLink(t)
	b := startBroker(t)
	forwardMQTT(t, b, "/link/in", "/link/out", 1, 0)
	cfg := testConfig(Roundtrip, b, nil)
	cfg.Topic, cfg.ReplyTopic, cfg.Count, cfg.Warmup, cfg.Rate = "/link/in", "/link/out", 200, 10, 100
	cfg.Link = "custom:delay=40ms"
	res, err := run(t, Roundtrip, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e2e := row(t, res, MetricE2E)
	f := e2e.Figures
	t.Logf("40 ms each way: %+v", f)
	if e2e.Counts.Received != 200 || f.Min < 80 || f.P50 < 80 || f.Min > 88 {
		t.Fatalf("min %.3f ms (p50 %.3f) with 2 x 40 ms one-way delay, want min in [80, 88], p50 >= 80: %+v", f.Min, f.P50, e2e.Counts)
	}
	if checks := strings.Join(res.Checks, "\n"); !strings.Contains(checks, "link custom: delay=40ms") {
		t.Fatalf("self-check lacks the link:\n%s", checks)
	}
}

// TestLinkLoss drops 1% of packets each way: at QoS 1 TCP recovers every
// message, and the retransmissions show as a tail far above the median.
func TestLinkLoss(t *testing.T) {
	needLink(t)
	b := startBroker(t)
	forwardMQTT(t, b, "/loss/in", "/loss/out", 1, 0)
	cfg := testConfig(Roundtrip, b, nil)
	cfg.Topic, cfg.ReplyTopic, cfg.Count, cfg.Warmup, cfg.Rate = "/loss/in", "/loss/out", 400, 0, 100
	cfg.Link = "custom:delay=10ms,loss=1%"
	cfg.Timeout = 20 * time.Second
	res, err := run(t, Roundtrip, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e2e := row(t, res, MetricE2E)
	f := e2e.Figures
	t.Logf("1%% loss: %+v\n%s", f, strings.Join(res.Checks, "\n"))
	if e2e.Counts.Received != 400 || e2e.Counts.Lost() != 0 {
		t.Fatalf("QoS 1 over a lossy link lost messages: %+v", e2e.Counts)
	}
	// Each message crosses the link twice (2 x 10 ms). A lost segment is
	// resent after at least a round trip of its hop (20 ms: fast
	// retransmit, RACK, a tail-loss probe of about 2 RTT, or the 200 ms
	// minimum RTO), so the tail must stand at least 20 ms above the median
	// (measured here: about +30 ms).
	if f.P50 < 20 || f.P50 > 30 || f.Max < f.P50+20 {
		t.Fatalf("no visible loss tail: %+v", f)
	}
	if !strings.Contains(strings.Join(res.Checks, "\n"), "lost") {
		t.Fatal("self-check lacks the link counters")
	}
}

func TestLinkBadSpec(t *testing.T) {
	cfg := DefaultConfig(Roundtrip)
	cfg.ReplyTopic, cfg.Link = "/x", "custom:delay=soon"
	if err := cfg.Validate(Roundtrip); !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v", err)
	}
}
