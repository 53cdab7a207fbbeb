package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// result is one line of the benchmark CSV: scenario, system, then the
// probe's columns by name.
type result struct {
	scenario, system string
	col              map[string]string
}

func (r result) f(name string) float64 {
	v, err := strconv.ParseFloat(r.col[name], 64)
	if err != nil {
		return -1
	}
	return v
}

func (r result) i(name string) int { return int(r.f(name)) }

func readResults(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open results: %w", err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	head := recs[0]
	var out []result
	for _, rec := range recs[1:] {
		if len(rec) < 2 || rec[0] == "scenario" {
			continue
		}
		r := result{scenario: rec[0], system: rec[1], col: map[string]string{}}
		for j := 2; j < len(rec) && j < len(head); j++ {
			r.col[head[j]] = rec[j]
		}
		out = append(out, r)
	}
	return out, nil
}

// runSummary writes the markdown summary of one bench.sh run.
func runSummary(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("summary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	csvPath := fs.String("csv", "", "results CSV (scenario,system,probe columns)")
	envPath := fs.String("env", "", "environment notes to include verbatim")
	title := fs.String("title", "Ferry benchmark", "heading")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	rs, err := readResults(*csvPath)
	if err != nil {
		return err
	}
	w := &mdWriter{w: stdout}
	w.p("# %s\n\n", *title)
	if *envPath != "" {
		env, err := os.ReadFile(*envPath)
		if err != nil {
			return fmt.Errorf("env: %w", err)
		}
		w.p("## Environment\n\n```\n%s```\n\n", env)
	}
	writeReference(w, rs)
	writeThroughput(w, rs)
	writeLatency(w, rs)
	w.p("All rows: %s (columns: scenario, system, then the probe's CSV columns).\n", *csvPath)
	return w.err
}

type mdWriter struct {
	w   io.Writer
	err error
}

func (m *mdWriter) p(format string, a ...any) {
	if m.err == nil {
		_, m.err = fmt.Fprintf(m.w, format, a...)
	}
}

func ms(v float64) string {
	if v < 0 {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func rate(v float64) string {
	if v < 0 {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}

// target is a latency target row of docs/targets.md (keep the two equal).
type target struct{ p50, p99, max float64 }

func (t target) String() string {
	var parts []string
	if t.p50 > 0 {
		parts = append(parts, fmt.Sprintf("p50<=%g", t.p50))
	}
	if t.p99 > 0 {
		parts = append(parts, fmt.Sprintf("p99<=%g", t.p99))
	}
	if t.max > 0 {
		parts = append(parts, fmt.Sprintf("max<=%g", t.max))
	}
	return strings.Join(parts, ", ")
}

func (t target) verdict(r result) string {
	if r.col["p50_ms"] == "" {
		return "n/a"
	}
	ok := (t.p50 == 0 || r.f("p50_ms") <= t.p50) && (t.p99 == 0 || r.f("p99_ms") <= t.p99) &&
		(t.max == 0 || r.f("max_ms") <= t.max) && r.f("lost") == 0
	if ok {
		return "met"
	}
	return "MISSED"
}

var targets = map[string]target{
	"ref1/append": {p50: 1, p99: 2, max: 20},
	"ref1/e2e":    {p50: 1, p99: 3},
	"ref2/e2e":    {p50: 0.5, p99: 1.5, max: 20},
}

func writeReference(w *mdWriter, rs []result) {
	w.p("## Reference tests vs targets (docs/targets.md)\n\n")
	w.p("| scenario | system | metric | count | lost | dup | msg/s | avg | p50 | p90 | p99 | p99.9 | max | target | verdict |\n")
	w.p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if !strings.HasPrefix(r.scenario, "ref") {
			continue
		}
		key := strings.SplitN(r.scenario, "-", 2)[0] + "/" + r.col["metric"]
		t := targets[key]
		w.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.scenario, r.system, r.col["metric"], r.col["count"], r.col["lost"], r.col["duplicated"],
			rate(r.f("throughput_msg_s")), ms(r.f("avg_ms")), ms(r.f("p50_ms")), ms(r.f("p90_ms")),
			ms(r.f("p99_ms")), ms(r.f("p999_ms")), ms(r.f("max_ms")), t, t.verdict(r))
	}
	w.p("\nThe reference bridge's figures (docs/targets.md): MQTT->Kafka append avg 2.44, p50 2, p90 4, p99 5, max 70 ms; " +
		"Kafka->MQTT avg 1.25, p50 1, p90 2, p99 2, max 139 ms.\n\n")
}

// tputKey identifies a throughput cell.
type tputKey struct {
	loop                  string // open (pipelined, saturating) or closed
	payload, qos, clients int
}

func writeThroughput(w *mdWriter, rs []result) {
	cells := map[tputKey]map[string]result{}
	raw := map[int]float64{}
	for _, r := range rs {
		switch {
		case strings.HasPrefix(r.scenario, "raw"):
			raw[r.i("payload_bytes")] = r.f("throughput_msg_s")
		case strings.HasPrefix(r.scenario, "throughput") && r.col["metric"] == "e2e":
			loop := "closed"
			if r.f("rate") > 0 {
				loop = "open"
			}
			k := tputKey{loop, r.i("payload_bytes"), r.i("qos"), r.i("clients")}
			if cells[k] == nil {
				cells[k] = map[string]result{}
			}
			cells[k][r.system] = r
		}
	}
	if len(cells) == 0 && len(raw) == 0 {
		return
	}
	keys := make([]tputKey, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.loop != b.loop {
			return a.loop > b.loop // open first
		}
		if a.payload != b.payload {
			return a.payload < b.payload
		}
		if a.qos != b.qos {
			return a.qos < b.qos
		}
		return a.clients < b.clients
	})
	w.p("## Throughput MQTT -> Kafka\n\n")
	w.p("msg/s = distinct messages consumed from Kafka per second (first intended send to last arrival). " +
		"open = publishers pipeline at a rate above capacity (max sustained); closed = each publisher waits for its " +
		"PUBACK (Ferry acks after Kafka, Mosquitto at once). Raw = kafka-producer-perf-test acks=all, same payload.\n\n")
	w.p("| loop | payload B | QoS | publishers | Ferry msg/s | Ferry lost | forwarder msg/s | forwarder lost | Ferry/forwarder | Ferry/raw |\n")
	w.p("|---|---|---|---|---|---|---|---|---|---|\n")
	best := map[int]float64{}
	minVsFwd := -1.0
	for _, k := range keys {
		c := cells[k]
		fe, fw := c["ferry"], c["forwarder"]
		ft, wt := fe.f("throughput_msg_s"), fw.f("throughput_msg_s")
		if fe.col == nil {
			ft = -1
		}
		if fw.col == nil {
			wt = -1
		}
		if k.loop == "open" {
			best[k.payload] = max(best[k.payload], ft)
			if ft > 0 && wt > 0 && (minVsFwd < 0 || ft/wt < minVsFwd) {
				minVsFwd = ft / wt
			}
		}
		w.p("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n", k.loop, k.payload, k.qos, k.clients,
			rate(ft), fe.col["lost"], rate(wt), fw.col["lost"], ratio(ft, wt), ratio(ft, raw[k.payload]))
	}
	w.p("\n| payload B | raw Kafka msg/s | best Ferry msg/s (open) | Ferry/raw (target >= 0.5) | sustained target | verdict |\n|---|---|---|---|---|---|\n")
	pls := make([]int, 0, len(best))
	for p := range best {
		pls = append(pls, p)
	}
	sort.Ints(pls)
	for _, p := range pls {
		tgt := 100000.0
		if p >= 1024 {
			tgt = 50000
		}
		v := "met"
		if best[p] < tgt || (raw[p] > 0 && best[p]/raw[p] < 0.5) {
			v = "MISSED"
		}
		w.p("| %d | %s | %s | %s | >= %s msg/s | %s |\n", p, rate(raw[p]), rate(best[p]), ratio(best[p], raw[p]), rate(tgt), v)
	}
	if minVsFwd > 0 {
		v := "met"
		if minVsFwd < 3 {
			v = "MISSED"
		}
		w.p("\nWorst Ferry/forwarder ratio over the open-loop matrix: %.2fx (target >= 3x): %s\n", minVsFwd, v)
	}
	w.p("\n")
}

func writeLatency(w *mdWriter, rs []result) {
	byRate := map[float64]map[string]result{}
	for _, r := range rs {
		if strings.HasPrefix(r.scenario, "latency") && r.col["metric"] == "e2e" {
			k := r.f("rate")
			if byRate[k] == nil {
				byRate[k] = map[string]result{}
			}
			byRate[k][r.system] = r
		}
	}
	if len(byRate) == 0 {
		return
	}
	rates := make([]float64, 0, len(byRate))
	for k := range byRate {
		rates = append(rates, k)
	}
	sort.Float64s(rates)
	w.p("## Latency at fixed rates (open loop, QoS 1, 12 B, end to end = Kafka consume - intended send)\n\n")
	w.p("| rate msg/s | system | achieved msg/s | lost | p50 | p99 | p99.9 | max | Ferry p99 / forwarder p99 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range rates {
		fe, fw := byRate[k]["ferry"], byRate[k]["forwarder"]
		for _, sys := range []string{"ferry", "forwarder"} {
			r, ok := byRate[k][sys]
			if !ok {
				continue
			}
			cmp := ""
			if sys == "ferry" && fw.col != nil {
				cmp = ratio(fe.f("p99_ms"), fw.f("p99_ms"))
			}
			w.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rate(k), sys, rate(r.f("throughput_msg_s")),
				r.col["lost"], ms(r.f("p50_ms")), ms(r.f("p99_ms")), ms(r.f("p999_ms")), ms(r.f("max_ms")), cmp)
		}
	}
	w.p("\nTarget: Ferry's p99 lower than the forwarder's (ratio < 1).\n\n")
}
