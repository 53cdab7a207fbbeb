package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/ferry-bridge/ferry/probe"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// perfLine matches kafka-producer-perf-test's final summary line, e.g.
// "200000 records sent, 39984.0 records/sec (0.46 MB/sec), 12.34 ms avg
// latency, 345.00 ms max latency, 10 ms 50th, 30 ms 95th, 40 ms 99th, 50 ms
// 99.9th."
var perfLine = regexp.MustCompile(`^(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th`)

// runPerfCSV converts kafka-producer-perf-test's output (stdin) into one
// CSV row in the probe's columns: direction kafka-produce, metric ack (the
// producer's send-to-ack latency; p90 and min are not reported by the tool
// and are left empty as 0 is not a measurement: they are written as -1).
func runPerfCSV(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("perfcsv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	payload := fs.Int("payload-bytes", 0, "record size (CSV column)")
	rate := fs.Float64("rate", -1, "--throughput given to the tool (CSV column)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var m []string
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if mm := perfLine.FindStringSubmatch(sc.Text()); mm != nil {
			m = mm // the last summary line wins (warm-up runs print two)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if m == nil {
		return fmt.Errorf("no summary line from kafka-producer-perf-test on stdin")
	}
	f := make([]float64, len(m))
	for i := 1; i < len(m); i++ {
		f[i], _ = strconv.ParseFloat(m[i], 64)
	}
	n := int64(f[1])
	row := probe.Row{
		Direction: probe.Direction("kafka-produce"), Metric: "ack",
		Counts:         stats.Counts{Expected: n, Received: n},
		ThroughputMsgS: f[2],
		Figures: stats.Figures{Count: n, Min: -1, Avg: f[3], Max: f[4],
			P50: f[5], P90: -1, P95: f[6], P99: f[7], P999: f[8]},
		Available:    true,
		QoS:          -1,
		PayloadBytes: *payload,
		Rate:         *rate,
		Clients:      1,
		Status:       "kafka-producer-perf-test acks=all; whole-ms figures; min and p90 not reported (-1)",
	}
	return probe.WriteCSV(stdout, []probe.Row{row})
}
