package probe

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ferry-bridge/ferry/probe/stats"
)

// Row is one (direction, metric) line of a result.
type Row struct {
	Direction Direction
	Metric    string
	// Counts are the delivery figures (shared by the metrics of one
	// direction).
	Counts stats.Counts
	// ThroughputMsgS is the distinct measured messages received per second,
	// from the intended send time of the first measured message to the
	// arrival of the last.
	ThroughputMsgS float64
	// Figures are the latency figures in ms; valid only when Available.
	Figures stats.Figures
	// Available is false when the metric could not be measured (e.g. the
	// topic's records carry CreateTime, not LogAppendTime); Status says
	// why.
	Available bool
	Status    string
	// Negative counts samples below 0 recorded as 0 (append: a sub-ms
	// append against a whole-ms LogAppendTime).
	Negative int64

	QoS          int
	PayloadBytes int
	Rate         float64
	Clients      int
	Subscribers  int
	Warmup       int
	// Fanout, when subscribers were connected, are the connection figures
	// (also in the CSV's last columns).
	Fanout *Fanout
}

// Fanout describes the MQTT subscribers of a run (kafka-to-mqtt,
// roundtrip): how they connected and what each received.
type Fanout struct {
	// Attempted and Connected count subscribers; Connected counts those
	// that got CONNACK and SUBACK. Only connected subscribers are in the
	// figures.
	Attempted, Connected int
	// Ramp is the requested connection rate per second (0: all at once);
	// RampSeconds how long connecting them all took.
	Ramp, RampSeconds float64
	// ConnectMs is the time from CONNECT to CONNACK of the connected
	// subscribers, in ms.
	ConnectMs stats.Figures
	// FirstError is the first connection failure ("" when none).
	FirstError string
	// PerSubscriber lists each connected subscriber's figures.
	PerSubscriber []SubscriberFigures
	// Complete counts subscribers that received every measured message.
	Complete int
	// MinMsgS, AvgMsgS and MaxMsgS summarise the subscribers' throughputs.
	MinMsgS, AvgMsgS, MaxMsgS float64

	connectTime *stats.Latency
}

// SuccessRate is Connected / Attempted.
func (f *Fanout) SuccessRate() float64 {
	if f.Attempted == 0 {
		return 0
	}
	return float64(f.Connected) / float64(f.Attempted)
}

// SubscriberFigures are one subscriber's delivery figures (measured
// messages).
type SubscriberFigures struct {
	Received, Lost, Duplicated int64
	// ThroughputMsgS is distinct messages per second from the intended
	// send time of the first measured message to this subscriber's last
	// arrival.
	ThroughputMsgS float64
}

// Result is the outcome of one run.
type Result struct {
	Direction Direction
	// Config is the run's configuration with defaults applied.
	Config Config
	// KafkaTopic is the Kafka topic used ("" for roundtrip unless split at
	// the Kafka append).
	KafkaTopic   string
	PayloadBytes int
	Rows         []Row
	// Checks are the self-check lines printed with the results.
	Checks []string
	// Foreign counts received messages that were not this run's.
	Foreign int64
	// Fanout describes the subscribers (nil for mqtt-to-kafka).
	Fanout *Fanout

	raw       []RawLine
	hists     map[string]*stats.Latency
	timelines map[string]*stats.Timeline
}

// Latency returns the merged distribution of an available metric's
// measured messages, or nil.
func (r *Result) Latency(metric string) *stats.Latency { return r.hists[metric] }

// Timeline returns an available metric's samples by second of arrival
// (second 0 starts when the run starts), or nil.
func (r *Result) Timeline(metric string) *stats.Timeline { return r.timelines[metric] }

// RawLine is one line of the raw file: a message and one of its arrivals.
// A lost message has one line with RecvNs 0; a duplicated one has one line
// per arrival.
type RawLine struct {
	Seq      uint32
	SendNs   int64 // actual send time, Unix ns
	AppendMs int64 // Kafka LogAppendTime, Unix ms; -1 when none
	RecvNs   int64 // receive time, Unix ns; 0 when never received
}

// Raw returns the per-message lines (nil unless Config.Raw).
func (r *Result) Raw() []RawLine { return r.raw }

// CSVHeader is the first line of the CSV file. The first 19 columns are a
// contract; more may be appended at the end.
var CSVHeader = []string{
	"direction", "metric", "count", "lost", "duplicated", "reordered", "throughput_msg_s",
	"min_ms", "avg_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms",
	"qos", "payload_bytes", "rate", "clients",
	"subscribers", "warmup", "status", "negative_clamped",
	"subscribers_attempted", "subscribers_connected", "connect_p50_ms", "connect_p99_ms",
}

// Plural is "1 client", "4 clients".
func Plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

// LatencyUnits says how to read the latency figures; the table prints it.
const LatencyUnits = "latencies in ms with 3 decimals (microsecond resolution); append is whole ms (Kafka's LogAppendTime has no finer unit)"

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// csvRecord renders a row; unavailable latency figures are empty cells.
func (row Row) csvRecord() []string {
	c := row.Counts
	lat := make([]string, 8)
	if row.Available {
		f := row.Figures
		for i, v := range []float64{f.Min, f.Avg, f.P50, f.P90, f.P95, f.P99, f.P999, f.Max} {
			lat[i] = ms(v)
		}
	}
	rec := []string{
		string(row.Direction), row.Metric,
		strconv.FormatInt(c.Received, 10), strconv.FormatInt(c.Lost(), 10),
		strconv.FormatInt(c.Duplicated, 10), strconv.FormatInt(c.Reordered, 10),
		strconv.FormatFloat(row.ThroughputMsgS, 'f', 1, 64),
	}
	rec = append(rec, lat...)
	rec = append(rec,
		strconv.Itoa(row.QoS), strconv.Itoa(row.PayloadBytes),
		strconv.FormatFloat(row.Rate, 'f', -1, 64), strconv.Itoa(row.Clients),
		strconv.Itoa(row.Subscribers), strconv.Itoa(row.Warmup), row.Status,
		strconv.FormatInt(row.Negative, 10),
	)
	if f := row.Fanout; f != nil {
		return append(rec, strconv.Itoa(f.Attempted), strconv.Itoa(f.Connected), ms(f.ConnectMs.P50), ms(f.ConnectMs.P99))
	}
	return append(rec, "", "", "", "")
}

// WriteCSV writes the header and one line per row.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	for _, row := range rows {
		if err := cw.Write(row.csvRecord()); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// RawHeader is the first line of the raw file. Absolute times carry their
// unit and origin in the name (_ns: Unix nanoseconds, _time_ms: Unix
// milliseconds); append_ms and e2e_ms are latencies.
var RawHeader = []string{"seq", "send_ns", "recv_ns", "log_append_time_ms", "append_ms", "e2e_ms"}

// WriteRaw writes the per-message lines (RawHeader): append_ms is Kafka's
// LogAppendTime minus the send time, both in whole ms, as the append
// metric; e2e_ms is receive - send with microsecond resolution. Empty
// log_append_time_ms and append_ms: no LogAppendTime; empty recv_ns and
// e2e_ms: never received.
func WriteRaw(w io.Writer, lines []RawLine) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, strings.Join(RawHeader, ","))
	buf := make([]byte, 0, 96)
	for _, l := range lines {
		buf = strconv.AppendUint(buf[:0], uint64(l.Seq), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, l.SendNs, 10)
		buf = append(buf, ',')
		if l.RecvNs != 0 {
			buf = strconv.AppendInt(buf, l.RecvNs, 10)
		}
		buf = append(buf, ',')
		if l.AppendMs >= 0 {
			buf = strconv.AppendInt(buf, l.AppendMs, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, appendLatencyNs(l.AppendMs, l.SendNs)/1e6, 10)
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, ',')
		if l.RecvNs != 0 {
			buf = strconv.AppendFloat(buf, float64(l.RecvNs-l.SendNs)/1e6, 'f', 3, 64)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("write raw: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write raw: %w", err)
	}
	return nil
}

// WriteTable prints the result for humans: the reference's table (avg, max,
// 50%, 90%, 99%), then the rest of the figures and the self-check.
func WriteTable(w io.Writer, r *Result) error {
	var b strings.Builder
	c := r.Config
	loop := "closed loop (no --rate)"
	if c.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g msg/s", c.Rate)
	}
	path := c.Topic + " -> " + r.KafkaTopic
	switch r.Direction {
	case KafkaToMQTT:
		path = r.KafkaTopic + " -> " + c.Topic
	case Roundtrip:
		path = c.Topic + " @ " + c.MQTT + " -> " + c.ReplyTopic + " @ " + c.ReplyMQTT
		if r.KafkaTopic != "" {
			path = c.Topic + " @ " + c.MQTT + " -> " + r.KafkaTopic + " -> " + c.ReplyTopic + " @ " + c.ReplyMQTT
		}
	}
	fmt.Fprintf(&b, "probe %s: %s, %s (+%d warm-up), QoS %d, %d B payload, %s, %s, %s\n\n",
		r.Direction, path, Plural(int64(c.Count), "message"), c.Warmup, c.QoS, r.PayloadBytes,
		Plural(int64(c.Clients), "client"), Plural(int64(c.Subscribers), "subscriber"), loop)

	b.WriteString(LatencyUnits + "\n")
	for _, row := range r.Rows {
		if row.Metric == MetricDelivery {
			b.WriteString("delivery starts at the Kafka record's LogAppendTime (whole ms): a sample can read up to 1 ms long\n")
			break
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "%-14s %-8s %10s %10s %10s %10s %10s   (ms)\n", "direction", "metric", "avg", "max", "50%", "90%", "99%")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-14s %-8s ", row.Direction, row.Metric)
		if !row.Available {
			fmt.Fprintf(&b, "%s\n", row.Status)
			continue
		}
		f := row.Figures
		fmt.Fprintf(&b, "%10s %10s %10s %10s %10s\n", ms(f.Avg), ms(f.Max), ms(f.P50), ms(f.P90), ms(f.P99))
	}
	fmt.Fprintf(&b, "\n%-14s %-8s %9s %7s %6s %7s %11s %10s %10s %10s\n",
		"direction", "metric", "count", "lost", "dup", "reord", "msg/s", "min", "95%", "99.9%")
	for _, row := range r.Rows {
		cn := row.Counts
		fmt.Fprintf(&b, "%-14s %-8s %9d %7d %6d %7d %11.1f ", row.Direction, row.Metric,
			cn.Received, cn.Lost(), cn.Duplicated, cn.Reordered, row.ThroughputMsgS)
		if row.Available {
			f := row.Figures
			fmt.Fprintf(&b, "%10s %10s %10s", ms(f.Min), ms(f.P95), ms(f.P999))
		}
		b.WriteString("\n")
	}
	if f := r.Fanout; f != nil {
		ramp := "all at once"
		if f.Ramp > 0 {
			ramp = fmt.Sprintf("ramped at %g/s", f.Ramp)
		}
		fmt.Fprintf(&b, "\nsubscribers: %d of %d connected (%.2f%%), %s in %.2f s; connect time (CONNECT -> CONNACK) p50 %s ms, p99 %s ms, max %s ms\n",
			f.Connected, f.Attempted, 100*f.SuccessRate(), ramp, f.RampSeconds, ms(f.ConnectMs.P50), ms(f.ConnectMs.P99), ms(f.ConnectMs.Max))
		if f.FirstError != "" {
			fmt.Fprintf(&b, "  first connection failure: %s\n", f.FirstError)
		}
		var minRecv, maxRecv int64 = -1, 0
		for _, s := range f.PerSubscriber {
			if minRecv < 0 || s.Received < minRecv {
				minRecv = s.Received
			}
			maxRecv = max(maxRecv, s.Received)
		}
		fmt.Fprintf(&b, "  per subscriber: received min %d max %d of %d, %d complete; throughput min %.1f avg %.1f max %.1f msg/s\n",
			minRecv, maxRecv, c.Count, f.Complete, f.MinMsgS, f.AvgMsgS, f.MaxMsgS)
		if len(r.Rows) > 0 {
			row := r.Rows[len(r.Rows)-1]
			fmt.Fprintf(&b, "  aggregate: %d deliveries, %.1f deliveries/s, lost %d, duplicated %d\n",
				row.Counts.Received, row.ThroughputMsgS, row.Counts.Lost(), row.Counts.Duplicated)
		}
	}
	b.WriteString("\nself-check:\n")
	for _, l := range r.Checks {
		b.WriteString("  " + l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
