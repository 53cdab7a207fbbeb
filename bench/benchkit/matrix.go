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

// matrixPrefix are the columns scripts/bench.sh puts before the probe's CSV
// columns in matrix.csv.
var matrixPrefix = []string{"system", "topics", "load1", "bridge_dropped"}

// Systems of the matrix.
const (
	sysFerry     = "ferry"
	sysMosquitto = "mosquitto"     // Mosquitto alone, --ack-only: the MQTT ceiling
	sysForwarder = "forwarder"     // Mosquitto + bench/forwarder
	sysRawFerry  = "raw-ferrybat"  // kafka-producer-perf-test, Ferry's batch settings
	sysRawDef    = "raw-kafkadefs" // kafka-producer-perf-test, Kafka's default batching
	sysReverse   = "ferry-reverse" // probe kafka-to-mqtt at a fixed rate
)

type cell struct {
	qos, payload, clients, topics int
}

type mrow struct {
	system              string
	c                   cell
	load                string
	dropped             int64
	metric              string
	count, lost         int64
	msgS                float64
	p50, p99, avg, p999 float64
}

// runMatrix writes the side-by-side markdown table of scripts/bench.sh's
// matrix.csv.
func runMatrix(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("csv", "", "matrix.csv of scripts/bench.sh")
	env := fs.String("env", "", "env.txt to include")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	f, err := os.Open(*path)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer f.Close()
	rows, err := readMatrix(f)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "# Ferry side-by-side benchmark (scripts/bench.sh)")
	fmt.Fprintln(stdout)
	if *env != "" {
		if b, err := os.ReadFile(*env); err == nil {
			fmt.Fprintf(stdout, "```\n%s```\n\n", b)
		}
	}
	writeMatrix(stdout, rows)
	writeReverse(stdout, rows)
	return nil
}

func readMatrix(r io.Reader) ([]mrow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read matrix csv: %w", err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("matrix csv has no rows")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, h := range []string{"system", "topics", "load1", "bridge_dropped", "metric", "count", "lost", "throughput_msg_s", "p50_ms", "p99_ms", "avg_ms", "p999_ms", "qos", "payload_bytes", "clients"} {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("matrix csv lacks column %q", h)
		}
	}
	var out []mrow
	for _, rec := range recs[1:] {
		if len(rec) != len(recs[0]) {
			continue
		}
		get := func(h string) string { return rec[col[h]] }
		num := func(h string) float64 { v, _ := strconv.ParseFloat(get(h), 64); return v }
		out = append(out, mrow{
			system: get("system"), load: get("load1"), dropped: int64(num("bridge_dropped")), metric: get("metric"),
			c:     cell{qos: int(num("qos")), payload: int(num("payload_bytes")), clients: int(num("clients")), topics: int(num("topics"))},
			count: int64(num("count")), lost: int64(num("lost")), msgS: num("throughput_msg_s"),
			p50: num("p50_ms"), p99: num("p99_ms"), avg: num("avg_ms"), p999: num("p999_ms"),
		})
	}
	return out, nil
}

// pick returns the row of system for c with metric (any metric if "").
func pick(rows []mrow, system string, c cell, metric string) (mrow, bool) {
	for _, r := range rows {
		if r.system == system && r.c == c && (metric == "" || r.metric == metric) {
			return r, true
		}
	}
	return mrow{}, false
}

func rawFor(rows []mrow, system string, payload int) (mrow, bool) {
	for _, r := range rows {
		if r.system == system && r.c.payload == payload {
			return r, true
		}
	}
	return mrow{}, false
}

func mrate(r mrow, ok bool) string {
	if !ok {
		return "—"
	}
	return strconv.FormatFloat(r.msgS, 'f', 0, 64)
}

func mratio(a, b mrow, aok, bok bool) string {
	if !aok || !bok || b.msgS <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", a.msgS/b.msgS)
}

func lostPct(r mrow, ok bool) string {
	if !ok || r.count+r.lost == 0 {
		return "—"
	}
	if r.lost == 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(r.lost)/float64(r.count+r.lost))
}

func writeMatrix(w io.Writer, rows []mrow) {
	cells := map[cell]bool{}
	for _, r := range rows {
		if r.system == sysFerry {
			cells[r.c] = true
		}
	}
	var order []cell
	for c := range cells {
		order = append(order, c)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		for _, d := range [][2]int{{a.qos, b.qos}, {a.payload, b.payload}, {a.topics, b.topics}, {a.clients, b.clients}} {
			if d[0] != d[1] {
				return d[0] < d[1]
			}
		}
		return false
	})
	fmt.Fprintln(w, "## MQTT -> Kafka, side by side")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "msg/s: Ferry and forwarder = distinct messages consumed from Kafka per second (QoS 0: what reached Kafka, "+
		"not what was sent; `lost` is the share that never reached Kafka, `dropped` what Ferry counted as dropped in "+
		"`ferry_dropped_total`); Mosquitto alone = acknowledged publishes per second (QoS 0 has no acknowledgement: a "+
		"PINGREQ after every 256 publishes stands in, its PINGRESP means Mosquitto processed them); raw = kafka-producer-perf-test acks=all, same payload, one topic, Ferry's batch settings "+
		"(linger 0, at most 1000 records / 1 MiB per batch). The same probe (raw MQTT engine, QoS 1 with 256 publishes in "+
		"flight per connection) drives every MQTT system. load = 1-minute load average before the run.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| QoS | payload B | topics | conns | Ferry msg/s | Ferry lost | Ferry dropped | Ferry e2e p50 / p99 ms | Mosquitto alone msg/s | forwarder msg/s | forwarder lost | raw msg/s | Ferry/Mosquitto | Ferry/forwarder | Ferry/raw | load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range order {
		fe, fok := pick(rows, sysFerry, c, "e2e")
		mo, mok := pick(rows, sysMosquitto, c, "ack")
		fw, wok := pick(rows, sysForwarder, c, "e2e")
		raw, rok := rawFor(rows, sysRawFerry, c.payload)
		lat := "—"
		if fok {
			lat = fmt.Sprintf("%.3f / %.3f", fe.p50, fe.p99)
		}
		fmt.Fprintf(w, "| %d | %d | %d | %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.qos, c.payload, c.topics, c.clients, mrate(fe, fok), lostPct(fe, fok), fe.dropped, lat, mrate(mo, mok),
			mrate(fw, wok), lostPct(fw, wok), mrate(raw, rok), mratio(fe, mo, fok, mok), mratio(fe, fw, fok, wok),
			mratio(fe, raw, fok, rok), fe.load)
	}
	fmt.Fprintln(w)
	var raws []string
	for _, sys := range []string{sysRawFerry, sysRawDef} {
		for _, r := range rows {
			if r.system == sys {
				raws = append(raws, fmt.Sprintf("| %s | %d | %.0f | %.0f / %.0f | %s |", sys, r.c.payload, r.msgS, r.p50, r.p99, r.load))
			}
		}
	}
	if len(raws) > 0 {
		fmt.Fprintln(w, "kafka-producer-perf-test, acks=all (raw-ferrybat: linger.ms=0 and batch.size = Ferry's 1000 records "+
			"or 1 MiB; raw-kafkadefs: the producer's defaults):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| settings | payload B | records/s | p50 / p99 ms (whole ms) | load |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		fmt.Fprintln(w, strings.Join(raws, "\n"))
		fmt.Fprintln(w)
	}
}

func writeReverse(w io.Writer, rows []mrow) {
	var lines []string
	for _, r := range rows {
		if r.system == sysReverse {
			lines = append(lines, fmt.Sprintf("| %s | %d | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %s |",
				r.metric, r.count, r.lost, r.msgS, r.avg, r.p50, r.p99, r.p999, r.load))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "## Kafka -> MQTT per hop (probe kafka-to-mqtt, QoS 1, 12 B, fixed rate; one clock)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "kafka = the probe's own Kafka consumer receive - produce (the floor); bridge = MQTT receive - the probe's "+
		"Kafka receive of the same record (Ferry's own share); e2e = MQTT receive - produce.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| metric | count | lost | msg/s | avg ms | p50 ms | p99 ms | p99.9 ms | load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	fmt.Fprintln(w, strings.Join(lines, "\n"))
	fmt.Fprintln(w)
}
