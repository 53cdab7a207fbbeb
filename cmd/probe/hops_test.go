package main

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-bridge/ferry/bridge"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// startBridge runs a bridge in this process on 127.0.0.1:0 against brokers
// and returns its MQTT address (host:port).
func startBridge(t *testing.T, brokers []string, mod func(*bridge.Config)) string {
	t.Helper()
	cfg := bridge.DefaultConfig()
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.HTTP.Listen = ""
	cfg.Kafka.Brokers = brokers
	mod(&cfg)
	b, err := bridge.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-runErr:
		cancel()
		t.Fatalf("bridge: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("bridge not ready after 30s")
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer ccancel()
		if err := b.Close(cctx); err != nil {
			t.Errorf("bridge close: %v", err)
		}
		cancel()
	})
	return b.MQTTAddr()
}

// TestDocsRoundtripHops runs docs/probe.md's "Round trip through Kafka, per
// hop" command against two bridge instances of this process sharing the
// real Kafka (FERRY_TEST_KAFKA): the messages reach the subscriber on B
// only through Kafka. The addresses, the topic (unique to the test) and
// the results directory are replaced. The CSV must have the split rows
// append and delivery beside e2e, each counting every delivery; the raw
// file must give every delivery its LogAppendTime, with sent <= appended
// <= received within the 1 ms resolution of LogAppendTime; each row is
// plotted.
func TestDocsRoundtripHops(t *testing.T) {
	root := repoRootDir(t)
	brokers := kafkatest.Brokers(t)
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	mqttTopic := "/probehops/" + hex.EncodeToString(rnd[:])
	kafkaTopic, err := topicmap.EncodeTopic(mqttTopic)
	if err != nil {
		t.Fatal(err)
	}
	// As the bridge creates its topics; created first so that both
	// instances' reverse paths consume it from the start.
	kafkatest.CreateTopic(t, brokers, kafkaTopic, 1, map[string]string{"message.timestamp.type": "LogAppendTime"})
	instance := func(id string) func(*bridge.Config) {
		return func(c *bridge.Config) {
			c.Instance.ID = id
			c.Reverse.Topics = []string{kafkaTopic}
			c.Reverse.StartOffset = "earliest"
		}
	}
	addrA := startBridge(t, kafkatest.Addrs(brokers), instance("hops-a"))
	addrB := startBridge(t, kafkatest.Addrs(brokers), instance("hops-b"))
	dir := t.TempDir()
	subst := strings.NewReplacer("127.0.0.1:21883", addrA, "127.0.0.1:21884", addrB, "127.0.0.1:9092", brokers,
		"/tacos/pub/lf", mqttTopic, "results/", dir+"/")
	lines := sectionCommands(t, root, "docs/probe.md", "Round trip through Kafka, per hop")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "go run ./cmd/probe roundtrip ") ||
		!strings.Contains(lines[0], "--reply-mqtt") || !strings.Contains(lines[0], "--kafka") {
		t.Fatalf("want one probe roundtrip command with --reply-mqtt and --kafka, got %q", lines)
	}
	line := subst.Replace(lines[0])
	t.Logf("$ %s", line)
	args := strings.Fields(strings.TrimPrefix(line, "go run ./cmd/probe "))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
	}
	t.Logf("%s", out.String())
	for _, want := range []string{"roundtrip      append", "roundtrip      delivery", "roundtrip      e2e",
		"kafka topic " + kafkaTopic + ": message.timestamp.type config LogAppendTime"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table does not show %q", want)
		}
	}

	for _, m := range []string{"append", "delivery", "e2e"} {
		for _, kind := range []string{"cdf", "time"} {
			if _, err := os.Stat(filepath.Join(dir, "roundtrip-plots", "roundtrip-"+m+"-"+kind+".png")); err != nil {
				t.Errorf("no %s plot of %s: %v", kind, m, err)
			}
		}
	}

	recs := readCSV(t, filepath.Join(dir, "roundtrip.csv"))
	rows := map[string][]string{}
	for _, r := range recs[1:] {
		if r[0] != "roundtrip" {
			t.Fatalf("row %v", r)
		}
		rows[r[1]] = r
	}
	e2e := rows["e2e"]
	if len(recs) != 4 || e2e == nil || e2e[2] != "500" || e2e[3] != "0" {
		t.Fatalf("want the rows append, delivery and e2e, 500 received, none lost: %v", recs)
	}
	for _, m := range []string{"append", "delivery"} {
		r := rows[m]
		if r == nil || r[21] != "ok" || r[2] != e2e[2] || r[3] != "0" || r[8] == "" || r[14] == "" {
			t.Fatalf("row %s %v: want status ok, figures and the e2e row's count %s", m, r, e2e[2])
		}
	}
	appMax, _ := strconv.ParseFloat(rows["append"][14], 64)
	delMax, _ := strconv.ParseFloat(rows["delivery"][14], 64)
	e2eMax, _ := strconv.ParseFloat(e2e[14], 64)
	if appMax > e2eMax+1 || delMax > e2eMax+1 {
		t.Fatalf("a hop's max exceeds the trip's: append %.3f, delivery %.3f, e2e %.3f ms", appMax, delMax, e2eMax)
	}

	raw := readCSV(t, filepath.Join(dir, "roundtrip-raw.csv"))
	if strings.Join(raw[0], ",") != "seq,send_ns,recv_ns,log_append_time_ms,append_ms,e2e_ms" {
		t.Fatalf("raw header %v", raw[0])
	}
	const slack = int64(time.Millisecond) // LogAppendTime is whole ms
	joined := 0
	for _, l := range raw[1:] {
		seq, _ := strconv.Atoi(l[0])
		if seq < 50 { // warm-up
			continue
		}
		if l[2] == "" || l[3] == "" {
			t.Fatalf("measured message without its three times: %v", l)
		}
		sent, _ := strconv.ParseInt(l[1], 10, 64)
		recv, _ := strconv.ParseInt(l[2], 10, 64)
		app, _ := strconv.ParseInt(l[3], 10, 64)
		appNs := app * int64(time.Millisecond)
		if sent > appNs+slack || appNs > recv+slack {
			t.Fatalf("seq %d: sent %d, appended %d ms, received %d: not in order", seq, sent, app, recv)
		}
		joined++
	}
	if strconv.Itoa(joined) != e2e[2] {
		t.Fatalf("%d measured deliveries joined to their Kafka record, want every one of %s", joined, e2e[2])
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
