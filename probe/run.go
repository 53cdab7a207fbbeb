package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-bridge/ferry/probe/link"
	"github.com/ferry-bridge/ferry/probe/stamp"
	"github.com/ferry-bridge/ferry/probe/stats"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Run measures direction d. It returns the result even when it also returns
// ErrLost (a QoS >= 1 run lost messages) or ErrPartialConnect (some
// subscribers could not connect); other errors (bad config, unreachable
// brokers, failed sends) come with a nil result.
func Run(ctx context.Context, d Direction, cfg Config, env Env) (*Result, error) {
	if err := cfg.Validate(d); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(d)
	template, err := payloadTemplate(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{
		dir: d, cfg: cfg, env: env, log: env.logger(), clk: newClock(), template: template,
		res: &Result{Direction: d, Config: cfg, PayloadBytes: len(template),
			hists: map[string]*stats.Latency{}, timelines: map[string]*stats.Timeline{}},
	}
	r.cfg.PayloadSize = len(template)
	r.res.Config = r.cfg
	if d != Roundtrip || cfg.SplitAtKafka {
		r.kafkaTopic = cfg.KafkaTopic
		if r.kafkaTopic == "" {
			if r.kafkaTopic, err = topicmap.EncodeTopic(cfg.Topic); err != nil {
				return nil, fmt.Errorf("%w: topic=%q has no default Kafka mapping (give --kafka-topic): %w", ErrConfig, cfg.Topic, err)
			}
		}
		r.res.KafkaTopic = r.kafkaTopic
	}
	if cfg.Link != "" {
		if err := r.startLink(); err != nil {
			return nil, err
		}
		defer r.lnk.Close()
	}
	r.gen = newGenerator(r.clk, uint32(cfg.Warmup), uint32(cfg.Count), cfg.Rate, template)
	r.metricName = MetricE2E
	r.sysBusy0, _ = readSysCPU()
	r.cpuUser, r.cpuSys, _ = cpuTime()
	r.startNs = r.clk.now()
	switch d {
	case MQTTToKafka:
		err = r.mqttToKafka(ctx)
	case KafkaToMQTT:
		err = r.kafkaToMQTT(ctx)
	case Roundtrip:
		err = r.roundtrip(ctx)
	}
	if err != nil {
		return nil, err
	}
	return r.finish()
}

// payloadTemplate builds the payload every message copies before stamping.
func payloadTemplate(cfg Config) ([]byte, error) {
	var fill []byte
	size := cfg.PayloadSize
	if cfg.PayloadFile != "" {
		b, err := os.ReadFile(cfg.PayloadFile)
		if err != nil {
			return nil, fmt.Errorf("%w: payload-file: %w", ErrConfig, err)
		}
		fill = b
		if size == 0 {
			size = stamp.Size + len(b)
		}
	}
	if size == 0 {
		size = stamp.Size
	}
	p, err := stamp.Payload(size, fill)
	if err != nil {
		return nil, fmt.Errorf("%w: payload-size=%d: %w", ErrConfig, size, err)
	}
	return p, nil
}

// runner holds one run's state.
type runner struct {
	dir        Direction
	cfg        Config
	env        Env
	log        *slog.Logger
	clk        clock
	template   []byte
	kafkaTopic string
	gen        *generator
	streams    []*stream
	received   atomic.Int64
	startNs    int64
	endNs      int64
	complete   bool
	cpuUser    time.Duration
	cpuSys     time.Duration
	res        *Result
	checks     []string
	tl, appTL  *stats.Timeline
	lnk        *link.Link
	relays     map[string]string // broker URL -> relay address on the link
	// metricName is the name of the main latency row: e2e, or ack for
	// --ack-only.
	metricName string
	// hop and kafkaStream (kafka-to-mqtt): the probe's own Kafka consumer
	// and its receive time of every record.
	hop         *hop
	kafkaStream *stream
	sysBusy0    sysCPU
	// marker (kafka-to-mqtt) is the path check's record: subscribers that
	// receive it close markerCh once.
	marker     []byte
	markerCh   chan struct{}
	markerSeen sync.Once
	// split, appendStream and delivTL (roundtrip with SplitAtKafka): the
	// LogAppendTime of every record of the probe's own Kafka consumer, that
	// consumer's stream, and the timeline of the delivery metric (append's
	// is appTL). splitTS counts the consumed records' timestamp types.
	split        *appendTimes
	appendStream *stream
	delivTL      *stats.Timeline
	splitTS      tsCounts
}

func (r *runner) newStreams(n int, withAppend bool) []*stream {
	r.streams = make([]*stream, n)
	r.tl = stats.NewTimeline(r.startNs)
	if withAppend {
		r.appTL = stats.NewTimeline(r.startNs)
	}
	if r.dir == KafkaToMQTT && r.hop == nil {
		r.hop = &hop{recv: make([]atomic.Int64, r.gen.total)}
	}
	if r.split != nil {
		r.appTL = stats.NewTimeline(r.startNs)
		r.delivTL = stats.NewTimeline(r.startNs)
	}
	keys, key := r.orderKeys()
	for i := range r.streams {
		s := newStream(uint32(r.cfg.Warmup), uint32(r.cfg.Count), r.startNs, withAppend, r.cfg.Raw, &r.received)
		s.tr.OrderBy(keys, key)
		s.tl, s.appTL = r.tl, r.appTL
		s.hop = r.hop
		s.split, s.delivTL = r.split, r.delivTL
		switch {
		case i >= maxSinks:
			s.lat = r.streams[i%maxSinks].lat
		case r.hop != nil:
			s.lat.bridge = stats.NewLatency()
		case r.split != nil:
			s.lat.hopApp, s.lat.hopDeliv = stats.NewLatency(), stats.NewLatency()
		}
		r.streams[i] = s
	}
	return r.streams
}

// newKafkaStream is the stream of the probe's own Kafka consumer in
// kafka-to-mqtt: it feeds the hop and the kafka metric.
func (r *runner) newKafkaStream() *stream {
	s := newStream(uint32(r.cfg.Warmup), uint32(r.cfg.Count), r.startNs, false, false, nil)
	keys, key := r.orderKeys()
	s.tr.OrderBy(keys, key)
	s.recvAt = r.hop
	r.kafkaStream = s
	return s
}

// newAppendStream is the stream of the probe's own Kafka consumer in a
// split roundtrip: it records each record's LogAppendTime in r.split.
func (r *runner) newAppendStream() *stream {
	s := newStream(uint32(r.cfg.Warmup), uint32(r.cfg.Count), r.startNs, false, false, nil)
	keys, key := r.orderKeys()
	s.tr.OrderBy(keys, key)
	s.appendAt = r.split
	r.appendStream = s
	return s
}

// maxSinks bounds the latency histograms of a run: streams beyond it share
// (stream i uses sink i % maxSinks).
const maxSinks = 64

// generate runs the generator with a progress line, then waits up to
// Timeout for every stream to have received every message.
func (r *runner) generate(ctx context.Context, senders []sender) error {
	pctx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.progress(pctx)
	}()
	defer func() {
		stopProgress()
		<-progressDone
	}()
	if err := r.gen.run(ctx, senders); err != nil {
		return err
	}
	r.complete = r.waitStreams(ctx)
	r.endNs = r.clk.now()
	return ctx.Err()
}

func (r *runner) waitStreams(ctx context.Context) bool {
	t := time.NewTimer(r.cfg.Timeout)
	defer t.Stop()
	all := r.streams
	if r.kafkaStream != nil {
		all = append(slices.Clip(all), r.kafkaStream)
	}
	if r.appendStream != nil {
		all = append(slices.Clip(all), r.appendStream)
	}
	for _, s := range all {
		select {
		case <-s.done:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// progress writes a live line to env.Progress until ctx ends.
func (r *runner) progress(ctx context.Context) {
	w := r.env.Progress
	if w == nil {
		return
	}
	const every = 500 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	want := int64(r.gen.total) * int64(len(r.streams))
	var last int64
	for {
		select {
		case <-ctx.Done():
			fmt.Fprint(w, "\r\033[K")
			return
		case <-tick.C:
		}
		got := r.received.Load()
		p99 := 0.0
		for _, s := range r.streams {
			p99 = max(p99, s.p99())
		}
		fmt.Fprintf(w, "\r\033[Ksent %d/%d  received %d/%d  %.0f msg/s  running e2e p99 %.3f ms",
			r.gen.sent.Load(), r.gen.total, got, want, float64(got-last)/every.Seconds(), p99)
		last = got
	}
}

// finish merges the streams into rows and self-check lines.
func (r *runner) finish() (*Result, error) {
	cfg := r.cfg
	var counts stats.Counts
	e2e := stats.NewLatency()
	var app *stats.Latency
	var noApp int64
	merged := map[*sink]bool{}
	for _, s := range r.streams {
		s.mu.Lock()
		counts.Add(s.tr.Counts())
		r.res.Foreign += s.foreign
		s.mu.Unlock()
		k := s.lat
		if merged[k] {
			continue
		}
		merged[k] = true
		k.mu.Lock()
		e2e.Merge(k.e2e)
		if k.app != nil {
			if app == nil {
				app = stats.NewLatency()
			}
			app.Merge(k.app)
			noApp += k.noApp
		}
		k.mu.Unlock()
	}
	gs := r.gen.stats()
	thr := 0.0
	if counts.Received > 0 && counts.LastRecvNs > gs.measuredNs {
		thr = float64(counts.Received) * 1e9 / float64(counts.LastRecvNs-gs.measuredNs)
	}
	if f := r.res.Fanout; f != nil {
		f.ConnectMs = f.connectTime.Figures()
		f.MinMsgS = math.Inf(1)
		for _, s := range r.streams {
			s.mu.Lock()
			c := s.tr.Counts()
			s.mu.Unlock()
			sf := SubscriberFigures{Received: c.Received, Lost: c.Lost(), Duplicated: c.Duplicated}
			if c.Received > 0 && c.LastRecvNs > gs.measuredNs {
				sf.ThroughputMsgS = float64(c.Received) * 1e9 / float64(c.LastRecvNs-gs.measuredNs)
			}
			if sf.Lost == 0 {
				f.Complete++
			}
			f.MinMsgS = min(f.MinMsgS, sf.ThroughputMsgS)
			f.MaxMsgS = max(f.MaxMsgS, sf.ThroughputMsgS)
			f.AvgMsgS += sf.ThroughputMsgS / float64(len(r.streams))
			f.PerSubscriber = append(f.PerSubscriber, sf)
		}
	}
	row := func(metric string, l *stats.Latency) Row {
		return Row{
			Direction: r.dir, Metric: metric, Counts: counts, ThroughputMsgS: thr,
			Figures: l.Figures(), Available: l.Count() > 0, Status: "ok", Negative: l.Negative(),
			QoS: cfg.QoS, PayloadBytes: len(r.template), Rate: cfg.Rate, Clients: cfg.Clients,
			Subscribers: len(r.streams), Warmup: cfg.Warmup, Fanout: r.res.Fanout,
		}
	}
	if app != nil {
		ar := row(MetricAppend, app)
		switch {
		case noApp > 0:
			ar.Available = false
			ar.Status = fmt.Sprintf("unavailable: %d of %d records carry no LogAppendTime (topic is not message.timestamp.type=LogAppendTime)",
				noApp, counts.Received)
			ar.Figures = stats.Figures{}
		case app.Count() == 0:
			ar.Status = "unavailable: no records received"
		}
		r.res.Rows = append(r.res.Rows, ar)
		if ar.Available {
			r.res.hists[MetricAppend] = app
			r.res.timelines[MetricAppend] = r.appTL
		}
		if ar.Available {
			r.checks = append(r.checks, fmt.Sprintf(
				"append: computed as the reference test did, LogAppendTime (whole ms, broker clock) minus the send time "+
					"truncated to whole ms, so its figures are whole ms and compare with the reference's table; "+
					"%d of %d samples were negative (clock or truncation) and are counted as 0; e2e is sub-millisecond",
				app.Negative(), app.Count()))
		}
	}
	if r.kafkaStream != nil {
		ks := r.kafkaStream
		ks.mu.Lock()
		kc := ks.tr.Counts()
		ks.mu.Unlock()
		ks.lat.mu.Lock()
		kl := ks.lat.e2e
		ks.lat.mu.Unlock()
		kr := row(MetricKafka, kl)
		kr.Counts = kc
		kr.Subscribers = 1
		kr.ThroughputMsgS = 0
		if kc.Received > 0 && kc.LastRecvNs > gs.measuredNs {
			kr.ThroughputMsgS = float64(kc.Received) * 1e9 / float64(kc.LastRecvNs-gs.measuredNs)
		}
		if !kr.Available {
			kr.Status = "unavailable: the probe's Kafka consumer received nothing"
		}
		r.res.Rows = append(r.res.Rows, kr)
		if kr.Available {
			r.res.hists[MetricKafka] = kl
		}
		var missing int64
		for _, s := range r.streams {
			missing += s.resolveHops()
		}
		bridge := stats.NewLatency()
		seen := map[*sink]bool{}
		for _, s := range r.streams {
			if !seen[s.lat] {
				seen[s.lat] = true
				bridge.Merge(s.lat.bridge)
			}
		}
		br := row(MetricBridge, bridge)
		if !br.Available {
			br.Status = "unavailable: no message reached both the probe's Kafka consumer and an MQTT subscriber"
		}
		r.res.Rows = append(r.res.Rows, br)
		if br.Available {
			r.res.hists[MetricBridge] = bridge
		}
		r.checks = append(r.checks, fmt.Sprintf("per hop, one clock: kafka = the probe's own Kafka consumer receive - produce "+
			"(the floor under the bridge); bridge = MQTT receive - the probe's Kafka receive of the same record; "+
			"%d bridge samples negative (the bridge delivered before the probe's consumer saw the record) counted as 0; "+
			"%d MQTT arrivals had no Kafka receive", bridge.Negative(), missing))
	}
	if r.split != nil {
		r.splitRows(row, counts)
	}
	er := row(r.metricName, e2e)
	if !er.Available {
		er.Status = "unavailable: no messages received"
	}
	r.res.Rows = append(r.res.Rows, er)
	if er.Available {
		r.res.hists[r.metricName] = e2e
		r.res.timelines[r.metricName] = r.tl
	}

	r.checks = append(r.checks, r.clk.describe(), gs.describe())
	if r.lnk != nil {
		r.checks = append(r.checks, r.lnk.Describe())
	}
	if line, ok := r.cpuCheck(gs.sent); ok {
		r.checks = append(r.checks, line)
	}
	r.checks = append(r.checks, fmt.Sprintf("foreign messages ignored: %d", r.res.Foreign))
	if keys, _ := r.orderKeys(); keys > 1 {
		r.checks = append(r.checks, fmt.Sprintf("reordered: counted per publisher and topic (%d publishers x %d topics), "+
			"the order MQTT promises; publishers interleave freely", cfg.Clients, cfg.Topics))
	}
	if lost := counts.WarmupLost(); lost > 0 {
		r.checks = append(r.checks, fmt.Sprintf("warm-up messages lost: %d of %d", lost, counts.WarmupExpected))
	}
	if !r.complete {
		r.checks = append(r.checks, fmt.Sprintf("stopped waiting %v after the last send with messages missing", cfg.Timeout))
	}
	r.res.Checks = append(r.res.Checks, r.checks...)
	if cfg.Raw {
		r.res.raw = r.rawLines()
	}
	var errs []error
	if lost := counts.Lost() + counts.WarmupLost(); cfg.QoS >= 1 && lost > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d messages at QoS %d never arrived (%s)", ErrLost, lost,
			counts.Expected+counts.WarmupExpected, cfg.QoS, r.dir))
	}
	if f := r.res.Fanout; f != nil && f.Connected < f.Attempted {
		errs = append(errs, fmt.Errorf("%w: %d of %d subscribers could not connect to %s (first: %s)",
			ErrPartialConnect, f.Attempted-f.Connected, f.Attempted, cfg.MQTT, f.FirstError))
	}
	return r.res, errors.Join(errs...)
}

// rawLines lists every arrival and every lost message (per stream).
func (r *runner) rawLines() []RawLine {
	var out []RawLine
	for _, s := range r.streams {
		for _, a := range s.raw {
			app := a.appendMs
			if r.split != nil && app == noAppend {
				app = r.split.get(a.seq)
			}
			out = append(out, RawLine{Seq: a.seq, SendNs: r.gen.sentAt[a.seq], AppendMs: app, RecvNs: a.recvNs})
		}
		for seq := uint32(0); seq < r.gen.total; seq++ {
			if !s.tr.Seen(seq) {
				out = append(out, RawLine{Seq: seq, SendNs: r.gen.sentAt[seq], AppendMs: noAppend})
			}
		}
	}
	return out
}

// clientID prefixes the probe's MQTT client ids, unique per process and run.
func (r *runner) clientID(role string) string {
	return fmt.Sprintf("ferry-probe-%d-%x-%s", os.Getpid(), r.startNs&0xffffff, role)
}

// splitRows adds the rows of a split roundtrip, append and delivery, and
// their self-check line. Each counts the deliveries joined to their Kafka
// record's LogAppendTime; when the topic's records carry none, both are
// unavailable.
func (r *runner) splitRows(row func(string, *stats.Latency) Row, counts stats.Counts) {
	var missing int64
	for _, s := range r.streams {
		missing += s.resolveSplit()
	}
	app, deliv := stats.NewLatency(), stats.NewLatency()
	seen := map[*sink]bool{}
	for _, s := range r.streams {
		if seen[s.lat] {
			continue
		}
		seen[s.lat] = true
		s.lat.mu.Lock()
		app.Merge(s.lat.hopApp)
		deliv.Merge(s.lat.hopDeliv)
		s.lat.mu.Unlock()
	}
	la, other := r.splitTS.logAppend.Load(), r.splitTS.other.Load()
	for _, m := range []struct {
		name string
		l    *stats.Latency
		tl   *stats.Timeline
	}{{MetricAppend, app, r.appTL}, {MetricDelivery, deliv, r.delivTL}} {
		rw := row(m.name, m.l)
		switch {
		case other > 0:
			rw.Available, rw.Figures = false, stats.Figures{}
			rw.Status = fmt.Sprintf("unavailable: %d of %d records of %s carry no LogAppendTime (topic is not "+
				"message.timestamp.type=LogAppendTime): no split", other, la+other, r.kafkaTopic)
		case !rw.Available:
			rw.Status = fmt.Sprintf("unavailable: no delivery was joined to its record in %s", r.kafkaTopic)
		}
		r.res.Rows = append(r.res.Rows, rw)
		if rw.Available {
			r.res.hists[m.name] = m.l
			r.res.timelines[m.name] = m.tl
		}
	}
	if other > 0 {
		r.checks = append(r.checks, fmt.Sprintf("per hop through Kafka: skipped, the records of %s carry no LogAppendTime "+
			"(see its timestamp type above): only e2e is measured", r.kafkaTopic))
		return
	}
	r.checks = append(r.checks, fmt.Sprintf("per hop through Kafka, split at each record's LogAppendTime in %s (whole ms, "+
		"the broker's clock): append = LogAppendTime - send time, both whole ms, as mqtt-to-kafka's append; delivery = "+
		"MQTT receive - LogAppendTime (up to 1 ms long: the append's millisecond is truncated); %d of %d measured "+
		"deliveries joined to their record, %d had none; negative samples counted as 0: append %d, delivery %d",
		r.kafkaTopic, app.Count(), counts.Received, missing, app.Negative(), deliv.Negative()))
}
