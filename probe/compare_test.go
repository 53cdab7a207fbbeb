package probe

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/probe/stats"
)

func TestCompareRuns(t *testing.T) {
	mk := func(p50, thr float64, lost int64) string {
		var buf bytes.Buffer
		rows := []Row{
			{Direction: MQTTToKafka, Metric: MetricAppend, Status: "unavailable"},
			{Direction: MQTTToKafka, Metric: MetricE2E, Available: true, ThroughputMsgS: thr, QoS: 1, PayloadBytes: 12,
				Counts:  stats.Counts{Expected: 100, Received: 100 - lost},
				Figures: stats.Figures{P50: p50, P99: 2 * p50, Max: 0}},
		}
		if err := WriteCSV(&buf, rows); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	res, err := Compare(strings.NewReader(mk(2, 1000, 0)), strings.NewReader(mk(3, 500, 5)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Comparison{}
	for _, c := range res.Rows {
		got[c.Key+" "+c.Column] = c
	}
	check := func(k string, want float64) {
		t.Helper()
		c, ok := got[k]
		if !ok {
			t.Fatalf("no %q in %+v", k, res.Rows)
		}
		if !(math.IsNaN(want) && math.IsNaN(c.Ratio)) && math.Abs(c.Ratio-want) > 1e-9 {
			t.Fatalf("%s: ratio %v, want %v", k, c.Ratio, want)
		}
	}
	check("mqtt-to-kafka/e2e p50_ms", 1.5)
	check("mqtt-to-kafka/e2e p99_ms", 1.5)
	check("mqtt-to-kafka/e2e throughput_msg_s", 0.5)
	check("mqtt-to-kafka/e2e max_ms", 1) // 0 and 0
	check("mqtt-to-kafka/e2e lost", math.NaN())
	if _, ok := got["mqtt-to-kafka/append p50_ms"]; ok {
		t.Fatal("compared an unavailable (empty) figure")
	}
	if _, ok := got["mqtt-to-kafka/e2e qos"]; ok {
		t.Fatal("compared a configuration column")
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, res, "a.csv", "b.csv"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1.500") || !strings.Contains(out.String(), "n/a") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestCompareSweeps(t *testing.T) {
	mk := func(thr float64, clients ...int) string {
		var pts []SweepPoint
		for _, c := range clients {
			pts = append(pts, SweepPoint{Direction: MQTTToKafka, PayloadBytes: 12, Clients: c, Interval: time.Second,
				ThroughputMsgS: thr * float64(c), AvgMs: 1})
		}
		var buf bytes.Buffer
		if err := WriteSweepCSV(&buf, pts); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	res, err := Compare(strings.NewReader(mk(1, 1, 2)), strings.NewReader(mk(2, 2, 3)))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.OnlyA) != 1 || res.OnlyA[0] != "mqtt-to-kafka/12 B/1 clients" || len(res.OnlyB) != 1 {
		t.Fatalf("only %v %v", res.OnlyA, res.OnlyB)
	}
	for _, c := range res.Rows {
		if c.Column == "throughput_msg_s" && c.Ratio != 2 {
			t.Fatalf("%+v", c)
		}
	}
	if _, err := Compare(strings.NewReader(mk(1, 1)), strings.NewReader("direction,metric\nx,y\n")); err == nil {
		t.Fatal("compared a sweep with a run CSV")
	}
	if _, err := Compare(strings.NewReader("a,b\n"), strings.NewReader("a,b\n")); err == nil {
		t.Fatal("compared non-probe CSVs")
	}
}
