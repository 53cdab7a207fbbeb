package charts

import (
	"bytes"
	"context"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/probe"
)

// echoHook republishes what network clients publish on /in to /out.
type echoHook struct {
	mqtt.HookBase
	srv *mqtt.Server
}

func (h *echoHook) ID() string           { return "echo" }
func (h *echoHook) Provides(b byte) bool { return b == mqtt.OnPublished }
func (h *echoHook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	if !cl.Net.Inline && pk.TopicName == "/in" {
		_ = h.srv.Publish("/out", pk.Payload, false, 1)
	}
}

func echoBroker(t *testing.T) string {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddHook(&echoHook{srv: srv}, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return "tcp://" + l.Address()
}

// checkPNG asserts path is a decodable PNG of at least 10 KB and a real
// size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(b) < 10_000 || img.Bounds().Dx() < 500 || img.Bounds().Dy() < 300 {
		t.Fatalf("%s: %d bytes, %v", path, len(b), img.Bounds())
	}
}

func TestWriteRun(t *testing.T) {
	cfg := probe.DefaultConfig(probe.Roundtrip)
	cfg.MQTT = echoBroker(t)
	cfg.Topic, cfg.ReplyTopic = "/in", "/out"
	cfg.Count, cfg.Rate = 1500, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := probe.Run(ctx, probe.Roundtrip, cfg, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if d := os.Getenv("CHARTS_OUT"); d != "" {
		dir = d
	}
	paths, err := WriteRun(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "roundtrip-e2e-cdf.png"), filepath.Join(dir, "roundtrip-e2e-time.png")}
	if len(paths) != 2 || paths[0] != want[0] || paths[1] != want[1] {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	for _, p := range paths {
		checkPNG(t, p)
	}
}

func TestWriteSweep(t *testing.T) {
	var pts []probe.SweepPoint
	for _, payload := range []int{12, 120} {
		for _, c := range []int{1, 30, 60, 90} {
			thr := float64(min(c, 60)) * 0.2 // flattens at 60 clients
			pts = append(pts, probe.SweepPoint{
				Direction: probe.MQTTToKafka, PayloadBytes: payload, Clients: c, Interval: 5 * time.Second,
				OfferedMsgS: float64(c) * 0.2, Repeats: 1, ThroughputMsgS: thr, ThroughputBitS: thr * float64(8*payload),
				AvgMs: float64(c), P99Ms: 2 * float64(c),
			})
		}
	}
	res := &probe.SweepResult{Config: probe.SweepConfig{Direction: probe.MQTTToKafka, Interval: 5 * time.Second, Repeat: 1}, Points: pts}
	res.Knees = probe.FindKnees(res.Points)
	if len(res.Knees) != 2 || !res.Knees[0].Found || res.Knees[0].Clients != 60 {
		t.Fatalf("knees %+v", res.Knees)
	}
	dir := t.TempDir()
	if d := os.Getenv("CHARTS_OUT"); d != "" {
		dir = d
	}
	paths, err := WriteSweep(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("paths %v", paths)
	}
	for _, p := range paths {
		checkPNG(t, p)
	}
}

func TestNoData(t *testing.T) {
	if _, err := WriteSweep(t.TempDir(), &probe.SweepResult{}); err == nil {
		t.Fatal("empty sweep plotted")
	}
}
