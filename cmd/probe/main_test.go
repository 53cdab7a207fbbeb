package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
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

func startBroker(t *testing.T, echo bool) string {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if echo {
		if err := srv.AddHook(&echoHook{srv: srv}, nil); err != nil {
			t.Fatal(err)
		}
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

func runArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{nil, exitUsage},
		{[]string{"sideways"}, exitUsage},
		{[]string{"mqtt-to-kafka", "--no-such-flag"}, exitUsage},
		{[]string{"mqtt-to-kafka", "--payload-size", "11"}, exitUsage},
		{[]string{"kafka-to-mqtt", "extra"}, exitUsage},
		{[]string{"roundtrip"}, exitUsage}, // reply topic = topic on the same broker
		{[]string{"help"}, exitOK},
		{[]string{"kafka-to-mqtt", "--help"}, exitOK},
	}
	for _, tc := range tests {
		_, _, err := runArgs(t, tc.args...)
		if got := exitCode(err); got != tc.code {
			t.Errorf("%v: exit %d (%v), want %d", tc.args, got, err, tc.code)
		}
	}
}

// TestRoundtripLocal: --local times a broker's own delivery, publisher and
// subscribers on one topic of one broker (refused without it: above).
func TestRoundtripLocal(t *testing.T) {
	url := startBroker(t, false)
	csvPath := filepath.Join(t.TempDir(), "local.csv")
	out, _, err := runArgs(t, "roundtrip", "--local", "--mqtt", url, "--topic", "/fan", "--subscribers", "3",
		"--count", "40", "--rate", "1000", "--qos", "1", "--csv", csvPath)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	// Every subscriber gets every message: 3 x 40 deliveries, none lost.
	var row string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "roundtrip,e2e,") {
			row = l
		}
	}
	if f := strings.Split(row, ","); len(f) < 4 || f[2] != "120" || f[3] != "0" {
		t.Fatalf("roundtrip,e2e row %q: want count 120 (3 subscribers x 40), lost 0\n%s", row, b)
	}
}

func TestRoundtripWritesCSVAndRaw(t *testing.T) {
	url := startBroker(t, true)
	dir := t.TempDir()
	// Into a directory that does not exist yet, as the README's results/.
	csvPath, rawPath := filepath.Join(dir, "results", "out.csv"), filepath.Join(dir, "results", "raw.csv")
	out, _, err := runArgs(t, "roundtrip", "--mqtt", url, "--topic", "/in", "--reply-topic", "/out",
		"--count", "50", "--warmup", "5", "--rate", "1000", "--qos", "1", "--payload-size", "64",
		"--csv", csvPath, "--raw", rawPath)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, want := range []string{"avg", "99%", "roundtrip", "self-check:", "open loop", "latencies in ms", "microsecond resolution"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress line written to a non-terminal:\n%q", out)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	contract := "direction,metric,count,lost,duplicated,reordered,throughput_msg_s,min_ms,avg_ms,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,qos,payload_bytes,rate,clients"
	if len(recs) != 2 || strings.Join(recs[0][:19], ",") != contract {
		t.Fatalf("csv:\n%v", recs)
	}
	r := recs[1]
	if r[0] != "roundtrip" || r[1] != "e2e" || r[2] != "50" || r[3] != "0" || r[15] != "1" || r[16] != "64" || r[17] != "1000" || r[18] != "1" {
		t.Fatalf("csv row %v", r)
	}
	raw, err := os.ReadFile(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if lines[0] != "seq,send_ns,recv_ns,log_append_time_ms,append_ms,e2e_ms" || len(lines) != 56 {
		t.Fatalf("raw: %d lines, first %q", len(lines), lines[0])
	}
}

func TestLostMessagesExitNonZero(t *testing.T) {
	url := startBroker(t, false) // nothing comes back on /out
	out, _, err := runArgs(t, "roundtrip", "--mqtt", url, "--topic", "/in", "--reply-topic", "/out",
		"--count", "10", "--qos", "1", "--timeout", "200ms")
	if exitCode(err) != exitLost {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitLost)
	}
	if !strings.Contains(out, "self-check:") {
		t.Fatalf("results not printed on loss:\n%s", out)
	}
}

func TestUnreachableSaysWhere(t *testing.T) {
	_, _, err := runArgs(t, "roundtrip", "--mqtt", "tcp://127.0.0.1:1", "--reply-topic", "/x", "--connect-timeout", "1s")
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "127.0.0.1:1") ||
		!strings.Contains(err.Error(), "mqtt") {
		t.Fatalf("err %v", err)
	}
}

func TestPlotSweepAndCompare(t *testing.T) {
	url := startBroker(t, true)
	dir := t.TempDir()
	a, b, figs := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv"), filepath.Join(dir, "figs")
	for i, path := range []string{a, b} {
		args := []string{"roundtrip", "--mqtt", url, "--topic", "/in", "--reply-topic", "/out",
			"--count", "200", "--rate", "1000", "--csv", path}
		if i == 0 { // drawing is slow under -race: once is enough
			args = append(args, "--plot", figs)
		}
		out, _, err := runArgs(t, args...)
		if err != nil || (i == 0 && !strings.Contains(out, "plots: ")) {
			t.Fatalf("run: %v\n%s", err, out)
		}
	}
	for _, name := range []string{"roundtrip-e2e-cdf.png", "roundtrip-e2e-time.png"} {
		if st, err := os.Stat(filepath.Join(figs, name)); err != nil || st.Size() < 10_000 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	out, _, err := runArgs(t, "compare", a, b)
	if err != nil || !strings.Contains(out, "roundtrip/e2e") || !strings.Contains(out, "p99_ms") {
		t.Fatalf("compare: %v\n%s", err, out)
	}
	if _, _, err := runArgs(t, "compare", a); exitCode(err) != exitUsage {
		t.Fatalf("compare with one file: %v", err)
	}

	sweepCSV := filepath.Join(dir, "sweep.csv")
	out, _, err = runArgs(t, "sweep", "--direction", "roundtrip", "--mqtt", url, "--topic", "/in", "--reply-topic", "/out",
		"--clients", "1,2", "--payload", "12", "--interval", "100ms", "--duration", "1s", "--csv", sweepCSV, "--plot", figs)
	if err != nil || !strings.Contains(out, "knee rule") {
		t.Fatalf("sweep: %v\n%s", err, out)
	}
	f, err := os.Open(sweepCSV)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) != 3 || recs[1][0] != "roundtrip" || recs[2][7] != "20" {
		t.Fatalf("sweep csv %v %v", recs, err)
	}
	for _, name := range []string{"sweep-throughput.png", "sweep-latency.png"} {
		if st, err := os.Stat(filepath.Join(figs, name)); err != nil || st.Size() < 10_000 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, _, err := runArgs(t, "sweep", "--clients", "3,1"); exitCode(err) != exitUsage {
		t.Fatalf("descending clients: %v", err)
	}
}
