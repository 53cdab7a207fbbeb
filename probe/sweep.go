package probe

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SweepConfig is a grid of runs, like the network-simulator study: every
// publisher sends one message per Interval for Duration, for each number
// of clients and each payload size, Repeat times.
type SweepConfig struct {
	// Direction is measured at every point.
	Direction Direction
	// Base holds everything but Clients, PayloadSize, Count and Rate
	// (brokers, topic, QoS, warm-up, timeouts).
	Base Config
	// Clients lists the publisher counts, ascending.
	Clients []int
	// Payloads lists the payload sizes in bytes (at least 12 each).
	Payloads []int
	// Interval is each publisher's time between messages (5s in the
	// study; milliseconds for the high-rate variant).
	Interval time.Duration
	// Duration is each run's send time; each publisher sends
	// Duration/Interval messages (at least 1).
	Duration time.Duration
	// Repeat is the number of runs per point, averaged. Default 1.
	Repeat int
}

// Validate names the first bad field.
func (sc SweepConfig) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrConfig, field, v, why)
	}
	switch {
	case len(sc.Clients) == 0:
		return bad("clients", sc.Clients, "give at least one number of clients")
	case !slices.IsSorted(sc.Clients) || sc.Clients[0] < 1:
		return bad("clients", sc.Clients, "must be ascending and at least 1")
	case len(sc.Payloads) == 0:
		return bad("payload", sc.Payloads, "give at least one payload size")
	case sc.Interval <= 0:
		return bad("interval", sc.Interval, "must be positive")
	case sc.Duration < sc.Interval:
		return bad("duration", sc.Duration, "must be at least one interval")
	case sc.Repeat < 0:
		return bad("repeat", sc.Repeat, "must be at least 1")
	}
	for _, c := range sc.Clients {
		for _, p := range sc.Payloads {
			if err := sc.point(c, p).Validate(sc.Direction); err != nil {
				return err
			}
		}
	}
	return nil
}

// perClient is the number of messages each publisher sends.
func (sc SweepConfig) perClient() int { return max(1, int(sc.Duration/sc.Interval)) }

// point is the run configuration of one grid point.
func (sc SweepConfig) point(clients, payload int) Config {
	cfg := sc.Base
	cfg.Clients = clients
	cfg.PayloadSize = payload
	cfg.PayloadFile = ""
	cfg.Count = clients * sc.perClient()
	// Client c sends sequences c, c+N, ... at t0 + seq/rate: one message
	// per Interval each, staggered evenly across the interval.
	cfg.Rate = float64(clients) / sc.Interval.Seconds()
	cfg.Raw = false
	return cfg
}

// SweepPoint is one (payload, clients) point, averaged over its repeats.
type SweepPoint struct {
	Direction    Direction
	PayloadBytes int
	Clients      int
	Interval     time.Duration
	// OfferedMsgS is what the publishers send: Clients / Interval.
	OfferedMsgS float64
	Repeats     int
	// Sent, Received and Lost are summed over the repeats (measured
	// messages, distinct arrivals); Duplicated likewise.
	Sent, Received, Lost, Duplicated int64
	// LossPct is Lost / Sent in percent.
	LossPct float64
	// ThroughputMsgS is the mean over repeats of the run's received
	// throughput; ThroughputBitS is the same in payload bits.
	ThroughputMsgS, ThroughputBitS float64
	// MaxMsgS is the largest number of messages received in any one full
	// second of any repeat (the study's "maximum throughput");
	// MaxBitS is the same in payload bits.
	MaxMsgS, MaxBitS float64
	// AvgMs, P50Ms and P99Ms are means over repeats of the e2e figures;
	// MaxMs is the largest e2e latency of any repeat.
	AvgMs, P50Ms, P99Ms, MaxMs float64
	// Knee marks the knee point of its payload size (see Knees).
	Knee bool
}

// Knee is the knee of one payload size's throughput curve.
type Knee struct {
	PayloadBytes int
	// Found is false when throughput kept up over the whole range;
	// Clients is then the largest number of clients tried.
	Found   bool
	Clients int
	// Why explains the verdict with the figures.
	Why string
}

// KneeGainFraction is the knee rule's threshold: the knee is the last
// point before the first step (in ascending clients) whose received
// throughput gained per added client falls below this fraction of what an
// added client offers (1/Interval msg/s). Below the knee every client's
// messages get through; past it, added clients mostly add queueing, loss
// or latency.
const KneeGainFraction = 0.5

// FindKnees applies the knee rule to points (any order) per payload size,
// marks the knee points and returns one Knee per payload size, ascending.
func FindKnees(points []SweepPoint) []Knee {
	byPayload := map[int][]int{}
	for i, p := range points {
		byPayload[p.PayloadBytes] = append(byPayload[p.PayloadBytes], i)
	}
	var knees []Knee
	for _, payload := range slices.Sorted(maps.Keys(byPayload)) {
		idx := byPayload[payload]
		slices.SortFunc(idx, func(a, b int) int { return points[a].Clients - points[b].Clients })
		k := Knee{PayloadBytes: payload, Clients: points[idx[len(idx)-1]].Clients}
		k.Why = fmt.Sprintf("throughput gained per added client stayed >= %.0f%% of the offered per-client rate up to %d clients",
			100*KneeGainFraction, k.Clients)
		for j := 1; j < len(idx); j++ {
			a, b := points[idx[j-1]], points[idx[j]]
			offered := (b.OfferedMsgS - a.OfferedMsgS) / float64(b.Clients-a.Clients)
			gain := (b.ThroughputMsgS - a.ThroughputMsgS) / float64(b.Clients-a.Clients)
			if offered > 0 && gain < KneeGainFraction*offered {
				k.Found, k.Clients = true, a.Clients
				k.Why = fmt.Sprintf("from %d to %d clients each added client gained %.3f msg/s of the %.3f it offers (< %.0f%%)",
					a.Clients, b.Clients, gain, offered, 100*KneeGainFraction)
				points[idx[j-1]].Knee = true
				break
			}
		}
		knees = append(knees, k)
	}
	return knees
}

// SweepResult is the outcome of a sweep.
type SweepResult struct {
	Config SweepConfig
	// Points in run order: payload sizes outer, clients inner.
	Points []SweepPoint
	Knees  []Knee
	// Checks are self-check lines (generator behind schedule, probe CPU)
	// collected from the runs, prefixed with the point.
	Checks []string
}

// Sweep runs every point of sc. onPoint, if non-nil, is called after each
// point (for progress). Losses do not stop a sweep (they are figures);
// any other run error does.
func Sweep(ctx context.Context, sc SweepConfig, env Env, onPoint func(SweepPoint)) (*SweepResult, error) {
	if sc.Repeat == 0 {
		sc.Repeat = 1
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	res := &SweepResult{Config: sc}
	for _, payload := range sc.Payloads {
		for _, clients := range sc.Clients {
			pt := SweepPoint{
				Direction: sc.Direction, PayloadBytes: payload, Clients: clients, Interval: sc.Interval,
				OfferedMsgS: float64(clients) / sc.Interval.Seconds(), Repeats: sc.Repeat,
			}
			for rep := range sc.Repeat {
				r, err := Run(ctx, sc.Direction, sc.point(clients, payload), env)
				if err != nil && !errors.Is(err, ErrLost) {
					return res, fmt.Errorf("sweep point %d B x %d clients, repeat %d: %w", payload, clients, rep+1, err)
				}
				pt.add(r)
				for _, c := range r.Checks {
					if strings.Contains(c, "BEHIND") || strings.Contains(c, "SATURATED") || strings.Contains(c, "stopped waiting") {
						res.Checks = append(res.Checks, fmt.Sprintf("%d B x %d clients #%d: %s", payload, clients, rep+1, c))
					}
				}
			}
			pt.finish()
			res.Points = append(res.Points, pt)
			if onPoint != nil {
				onPoint(pt)
			}
		}
	}
	res.Knees = FindKnees(res.Points)
	return res, nil
}

// add accumulates one repeat (sums; finish turns them into means).
func (p *SweepPoint) add(r *Result) {
	for _, row := range r.Rows {
		if row.Metric != MetricE2E {
			continue
		}
		c := row.Counts
		p.Sent += c.Expected
		p.Received += c.Received
		p.Lost += c.Lost()
		p.Duplicated += c.Duplicated
		p.ThroughputMsgS += row.ThroughputMsgS
		if row.Available {
			p.AvgMs += row.Figures.Avg
			p.P50Ms += row.Figures.P50
			p.P99Ms += row.Figures.P99
			p.MaxMs = max(p.MaxMs, row.Figures.Max)
		}
	}
	if tl := r.Timeline(MetricE2E); tl != nil {
		p.MaxMsgS = max(p.MaxMsgS, float64(tl.PeakPerSecond()))
	}
}

func (p *SweepPoint) finish() {
	n := float64(p.Repeats)
	p.ThroughputMsgS /= n
	p.AvgMs /= n
	p.P50Ms /= n
	p.P99Ms /= n
	bits := float64(8 * p.PayloadBytes)
	p.ThroughputBitS = p.ThroughputMsgS * bits
	p.MaxBitS = p.MaxMsgS * bits
	if p.Sent > 0 {
		p.LossPct = 100 * float64(p.Lost) / float64(p.Sent)
	}
}

// SweepCSVHeader is the first line of a sweep CSV: one row per point.
var SweepCSVHeader = []string{
	"direction", "payload_bytes", "clients", "interval_ms", "offered_msg_s", "repeats",
	"sent", "received", "lost", "loss_pct", "duplicated",
	"throughput_msg_s", "throughput_bit_s", "max_throughput_msg_s", "max_throughput_bit_s",
	"avg_ms", "p50_ms", "p99_ms", "max_ms", "knee",
}

func (p SweepPoint) csvRecord() []string {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{
		string(p.Direction), strconv.Itoa(p.PayloadBytes), strconv.Itoa(p.Clients),
		f(float64(p.Interval)/1e6, 3), f(p.OfferedMsgS, 3), strconv.Itoa(p.Repeats),
		i(p.Sent), i(p.Received), i(p.Lost), f(p.LossPct, 3), i(p.Duplicated),
		f(p.ThroughputMsgS, 3), f(p.ThroughputBitS, 1), f(p.MaxMsgS, 0), f(p.MaxBitS, 0),
		ms(p.AvgMs), ms(p.P50Ms), ms(p.P99Ms), ms(p.MaxMs), strconv.FormatBool(p.Knee),
	}
}

// WriteSweepCSV writes the header and one row per point.
func WriteSweepCSV(w io.Writer, points []SweepPoint) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SweepCSVHeader); err != nil {
		return fmt.Errorf("write sweep csv: %w", err)
	}
	for _, p := range points {
		if err := cw.Write(p.csvRecord()); err != nil {
			return fmt.Errorf("write sweep csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write sweep csv: %w", err)
	}
	return nil
}

// WriteSweepTable prints the points and the knees for humans.
func WriteSweepTable(w io.Writer, r *SweepResult) error {
	var b strings.Builder
	sc := r.Config
	fmt.Fprintf(&b, "probe sweep %s: one message per %v per client for %v (%d per client), QoS %d, %d repeat(s)\n\n",
		sc.Direction, sc.Interval, sc.Duration, sc.perClient(), sc.Base.QoS, sc.Repeat)
	fmt.Fprintf(&b, "%7s %7s %10s %11s %12s %9s %11s %9s %9s %9s %7s\n",
		"payload", "clients", "offered/s", "recv msg/s", "recv bit/s", "max msg/s", "max bit/s", "avg ms", "p99 ms", "loss %", "knee")
	for _, p := range r.Points {
		knee := ""
		if p.Knee {
			knee = "<- knee"
		}
		fmt.Fprintf(&b, "%7d %7d %10.1f %11.1f %12.0f %9.0f %11.0f %9.3f %9.3f %9.3f %7s\n",
			p.PayloadBytes, p.Clients, p.OfferedMsgS, p.ThroughputMsgS, p.ThroughputBitS, p.MaxMsgS, p.MaxBitS,
			p.AvgMs, p.P99Ms, p.LossPct, knee)
	}
	fmt.Fprintf(&b, "\nknee rule: the last point before throughput gained per added client drops below %.0f%% of what a client offers\n",
		100*KneeGainFraction)
	for _, k := range r.Knees {
		if k.Found {
			fmt.Fprintf(&b, "  %d B: knee at %d clients (%s)\n", k.PayloadBytes, k.Clients, k.Why)
		} else {
			fmt.Fprintf(&b, "  %d B: no knee up to %d clients (%s)\n", k.PayloadBytes, k.Clients, k.Why)
		}
	}
	if len(r.Checks) > 0 {
		b.WriteString("\nself-check:\n")
		for _, c := range r.Checks {
			b.WriteString("  " + c + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ParseInts parses a comma-separated list of positive integers ("1,30,60").
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %q is not a positive integer", ErrConfig, f)
		}
		out = append(out, n)
	}
	return out, nil
}
