package probe

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestFanout200 connects 200 subscribers with a ramp and checks that every
// one of them received every message once, and the connection figures.
func TestFanout200(t *testing.T) {
	const subs, count = 200, 100
	b := startBroker(t)
	brokers := startKfake(t, "_fan_out")
	forwardKafkaToMQTT(t, b, brokers, "_fan_out", "/fan/out", 1, 0, passThrough)
	cfg := testConfig(KafkaToMQTT, b, brokers)
	cfg.Topic, cfg.Count, cfg.Warmup, cfg.Rate = "/fan/out", count, 10, 200
	cfg.Subscribers, cfg.Ramp = subs, 1000
	cfg.Timeout = 40 * time.Second // stragglers on a loaded 2-core machine
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := Run(ctx, KafkaToMQTT, cfg, Env{})
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fanout
	if f == nil || f.Attempted != subs || f.Connected != subs || f.SuccessRate() != 1 || f.Complete != subs {
		t.Fatalf("fanout %+v", f)
	}
	// 200 connections at 1000/s take at least 0.199 s.
	if f.RampSeconds < 0.19 || f.ConnectMs.Count != subs || f.ConnectMs.P50 <= 0 || f.ConnectMs.P99 < f.ConnectMs.P50 {
		t.Fatalf("connect figures %+v ramp %.3f s", f.ConnectMs, f.RampSeconds)
	}
	if len(f.PerSubscriber) != subs {
		t.Fatalf("%d per-subscriber figures", len(f.PerSubscriber))
	}
	for i, s := range f.PerSubscriber {
		if s.Received != count || s.Lost != 0 || s.Duplicated != 0 || s.ThroughputMsgS <= 0 {
			t.Fatalf("subscriber %d: %+v", i, s)
		}
	}
	e2e := row(t, res, MetricE2E)
	if e2e.Counts.Received != subs*count || e2e.Figures.Count != subs*count || e2e.Subscribers != subs {
		t.Fatalf("e2e %+v", e2e)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"200 of 200 connected (100.00%)", "ramped at 1000/s", "200 complete", "aggregate: 20000 deliveries"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := WriteCSV(&buf, res.Rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(buf.String(), "\n"); !strings.Contains(lines[1], ",200,200,") {
		t.Fatalf("csv %s", buf.String())
	}
}

// TestFanoutPartialConnect makes the broker refuse some subscribers: the
// others are measured and the run says how many failed.
func TestFanoutPartialConnect(t *testing.T) {
	b := startBroker(t)
	if err := b.srv.AddHook(&refuseHook{every: 3}, nil); err != nil {
		t.Fatal(err)
	}
	forwardMQTT(t, b, "/pc/in", "/pc/out", 1, 0)
	cfg := testConfig(Roundtrip, b, nil)
	cfg.Topic, cfg.ReplyTopic, cfg.Count, cfg.Warmup, cfg.Rate = "/pc/in", "/pc/out", 50, 0, 500
	cfg.Subscribers = 9
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, Roundtrip, cfg, Env{})
	if !errorsIs(err, ErrPartialConnect) || res == nil {
		t.Fatalf("err %v", err)
	}
	if f := res.Fanout; f.Attempted != 9 || f.Connected != 6 || f.Complete != 6 || f.FirstError == "" {
		t.Fatalf("fanout %+v", f)
	}
}

// refuseHook makes the broker drop every n-th subscriber's CONNECT (by
// the number at the end of its client id).
type refuseHook struct {
	mqtt.HookBase
	every int
}

func (h *refuseHook) ID() string           { return "test-refuse" }
func (h *refuseHook) Provides(b byte) bool { return b == mqtt.OnConnect }
func (h *refuseHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	id := cl.ID
	i := strings.LastIndex(id, "-")
	if !strings.Contains(id, "-sub-") || i < 0 {
		return nil
	}
	if n, err := strconv.Atoi(id[i+1:]); err == nil && n%h.every == 0 {
		return errRefused
	}
	return nil
}

var errRefused = errors.New("refused by test hook")

func errorsIs(err, target error) bool { return errors.Is(err, target) }
