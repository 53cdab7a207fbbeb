package probe

import (
	"bytes"
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"
)

// TestTinySweep runs 2 points of 2 s each through a forwarder to kfake and
// checks one CSV row per point with the offered load delivered.
func TestTinySweep(t *testing.T) {
	b := startBroker(t)
	brokers := startKfake(t, "_sweep_t")
	forwardMQTTToKafka(t, b, brokers, "/sweep/t", "_sweep_t", 0, passThrough)
	sc := SweepConfig{
		Direction: MQTTToKafka,
		Base:      testConfig(MQTTToKafka, b, brokers),
		Clients:   []int{1, 4},
		Payloads:  []int{12},
		Interval:  100 * time.Millisecond,
		Duration:  2 * time.Second,
	}
	sc.Base.Topic, sc.Base.Warmup = "/sweep/t", 0
	var seen []SweepPoint
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Sweep(ctx, sc, Env{}, func(p SweepPoint) { seen = append(seen, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 2 || len(seen) != 2 || len(res.Knees) != 1 {
		t.Fatalf("points %+v knees %+v", res.Points, res.Knees)
	}
	for i, p := range res.Points {
		want := int64(sc.Clients[i] * 20)
		if p.Sent != want || p.Received != want || p.Lost != 0 || p.ThroughputMsgS <= 0 || p.AvgMs <= 0 || p.MaxMsgS < 1 {
			t.Fatalf("point %d: %+v", i, p)
		}
		if p.OfferedMsgS != float64(sc.Clients[i])*10 || p.ThroughputBitS != p.ThroughputMsgS*96 {
			t.Fatalf("point %d: %+v", i, p)
		}
	}
	// 4 clients at 10 msg/s each must deliver about 4x one client.
	if k := res.Knees[0]; k.Found {
		t.Fatalf("knee found on an idle path: %+v\npoints %+v", k, res.Points)
	}
	var buf bytes.Buffer
	if err := WriteSweepCSV(&buf, res.Points); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || strings.Join(recs[0], ",") != strings.Join(SweepCSVHeader, ",") ||
		recs[1][2] != "1" || recs[2][2] != "4" || recs[2][7] != "80" {
		t.Fatalf("csv %v", recs)
	}
	var table bytes.Buffer
	if err := WriteSweepTable(&table, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "no knee up to 4 clients") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestFindKnees(t *testing.T) {
	// Offered: 1 msg/s per client. 12 B keeps up to 200 clients then
	// flattens; 120 B flattens after 100; 1 B never does.
	var pts []SweepPoint
	for _, c := range []int{1, 50, 100, 150, 200, 250} {
		for payload, limit := range map[int]float64{12: 200, 120: 100, 1: 1e9} {
			pts = append(pts, SweepPoint{PayloadBytes: payload, Clients: c, OfferedMsgS: float64(c),
				ThroughputMsgS: min(float64(c), limit)})
		}
	}
	knees := FindKnees(pts)
	want := []Knee{{PayloadBytes: 1, Found: false, Clients: 250}, {PayloadBytes: 12, Found: true, Clients: 200},
		{PayloadBytes: 120, Found: true, Clients: 100}}
	if len(knees) != 3 {
		t.Fatalf("knees %+v", knees)
	}
	for i, k := range knees {
		if k.PayloadBytes != want[i].PayloadBytes || k.Found != want[i].Found || k.Clients != want[i].Clients {
			t.Fatalf("knee %d: %+v, want %+v", i, k, want[i])
		}
	}
	marked := 0
	for _, p := range pts {
		if p.Knee {
			marked++
			if !(p.PayloadBytes == 12 && p.Clients == 200) && !(p.PayloadBytes == 120 && p.Clients == 100) {
				t.Fatalf("wrong point marked: %+v", p)
			}
		}
	}
	if marked != 2 {
		t.Fatalf("%d points marked", marked)
	}
}

func TestSweepValidate(t *testing.T) {
	ok := SweepConfig{Direction: MQTTToKafka, Base: DefaultConfig(MQTTToKafka), Clients: []int{1, 2}, Payloads: []int{12},
		Interval: time.Second, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*SweepConfig){
		"descending": func(s *SweepConfig) { s.Clients = []int{2, 1} },
		"payload":    func(s *SweepConfig) { s.Payloads = []int{11} },
		"interval":   func(s *SweepConfig) { s.Interval = 0 },
		"duration":   func(s *SweepConfig) { s.Duration = time.Millisecond },
	} {
		sc := ok
		mod(&sc)
		if err := sc.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
