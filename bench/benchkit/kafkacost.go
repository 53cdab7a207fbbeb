package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/ringbuffer"
	"github.com/ferry-bridge/ferry/topicmap"
)

// costShape is one way to write the same messages to Kafka: what each record
// carries besides its payload and how the producer batches and compresses.
type costShape struct {
	name        string
	key         bool
	headers     []string // standard header names; nil: none
	compression string
	linger      time.Duration
	maxBatch    int
}

var defaultHeaderNames = []string{topicmap.HeaderMQTTTopic, topicmap.HeaderQoS, topicmap.HeaderClientID,
	topicmap.HeaderOrigin, topicmap.HeaderPacketID}

// costShapes are the shapes kafkacost knows, in the order it runs them: from
// a bare record up to Ferry's default one, then the default with each
// producer setting changed alone.
var costShapes = []costShape{
	{name: "bare"},
	{name: "key", key: true},
	{name: "key+qos", key: true, headers: []string{topicmap.HeaderQoS}},
	{name: "key+4", key: true, headers: []string{topicmap.HeaderQoS, topicmap.HeaderClientID, topicmap.HeaderOrigin, topicmap.HeaderPacketID}},
	{name: "default", key: true, headers: defaultHeaderNames},
	{name: "default-nokey", headers: defaultHeaderNames},
	{name: "all", key: true, headers: append([]string{topicmap.HeaderSeq}, defaultHeaderNames...)},
	{name: "default+lz4", key: true, headers: defaultHeaderNames, compression: "lz4"},
	{name: "default+snappy", key: true, headers: defaultHeaderNames, compression: "snappy"},
	{name: "default+zstd", key: true, headers: defaultHeaderNames, compression: "zstd"},
	{name: "default+linger2ms", key: true, headers: defaultHeaderNames, linger: 2 * time.Millisecond},
	{name: "default+batch100", key: true, headers: defaultHeaderNames, maxBatch: 100},
}

// runKafkaCost writes the same messages to Kafka in each record shape, through
// Ferry's own producer (the bridge's batching and encoding, acks=all), and
// reports what each costs Kafka: its CPU per message (user+system from
// /proc, the broker JVM on this machine), the producer's own CPU per message,
// the rate, and the records per produce request. Shapes alternate within a
// round so that the machine's load falls on all of them alike; one untimed
// warm-up pass of every shape comes first (JIT, topic creation).
func runKafkaCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kafkacost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("kafka", "127.0.0.1:9092", "Kafka bootstrap brokers (comma-separated)")
	count := fs.Int("count", 1000000, "messages per shape and round")
	rounds := fs.Int("rounds", 3, "rounds (each runs every shape once)")
	payload := fs.Int("payload", 12, "payload bytes")
	topics := fs.Int("topics", 4, "Kafka topics written at once (one partition each)")
	inflight := fs.Int("inflight", 1024, "records waiting for Kafka at once (the MQTT benchmark's 4 x 256)")
	only := fs.String("shapes", "", "comma-separated shape names (default: all)")
	pidFlag := fs.Int("kafka-pid", 0, "the Kafka broker's pid (default: the one kafka.Kafka process here)")
	csvPath := fs.String("csv", "", "also write every run as CSV here")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: benchkit kafkacost [flags]\nshapes:")
		for _, s := range costShapes {
			fmt.Fprintf(stderr, "  %s\n", s.describe())
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *count < 1 || *rounds < 1 || *payload < 0 || *topics < 1 || *inflight < 1 {
		return fmt.Errorf("%w: count, rounds, topics and inflight must be >= 1, payload >= 0", errUsage)
	}
	shapes, err := pickShapes(*only)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	pid := *pidFlag
	if pid == 0 {
		if pid, err = findKafkaPid(); err != nil {
			return err
		}
	}
	prefix := fmt.Sprintf("_kc%d_", time.Now().Unix())
	addrs := strings.Split(*brokers, ",")
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteTopics(dctx, addrs, prefix); err != nil {
			fmt.Fprintln(stderr, "kafkacost: deleting topics:", err)
		}
	}()

	var w *csv.Writer
	if *csvPath != "" {
		f, err := os.Create(*csvPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w = csv.NewWriter(f)
		defer w.Flush()
		_ = w.Write([]string{"shape", "round", "records", "seconds", "msg_s", "kafka_cpu_us_msg", "producer_cpu_us_msg", "records_per_request", "load1"})
	}
	results := map[string][]costResult{}
	for round := 0; round <= *rounds; round++ {
		n := *count
		if round == 0 {
			n = max(*count/4, 1) // warm-up, not reported
		}
		order := make([]costShape, len(shapes))
		copy(order, shapes)
		if round%2 == 0 { // alternate the order so no shape always runs first
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for si, s := range order {
			r, err := runShape(ctx, s, costRun{brokers: addrs, topicPrefix: fmt.Sprintf("%s%s_", prefix, sanitize(s.name)),
				topics: *topics, count: n, payload: *payload, inflight: *inflight, kafkaPid: pid})
			if err != nil {
				return fmt.Errorf("shape %s: %w", s.name, err)
			}
			if round == 0 {
				fmt.Fprintf(stderr, "kafkacost: warm-up %d/%d %s: %.0f msg/s\n", si+1, len(order), s.name, r.rate)
				continue
			}
			fmt.Fprintf(stderr, "kafkacost: round %d %-18s %9.0f msg/s  kafka %.3f us/msg  producer %.3f us/msg  %.0f records/request  load %.2f\n",
				round, s.name, r.rate, r.kafkaUs, r.producerUs, r.perRequest, r.load)
			results[s.name] = append(results[s.name], r)
			if w != nil {
				_ = w.Write([]string{s.name, strconv.Itoa(round), strconv.Itoa(n), fmtF(r.seconds), fmtF(r.rate), fmtF(r.kafkaUs), fmtF(r.producerUs), fmtF(r.perRequest), fmtF(r.load)})
			}
		}
	}
	fmt.Fprintf(stdout, "kafkacost: %d messages of %d B per run, %d topics, %d in flight, acks=all, median of %d rounds\n",
		*count, *payload, *topics, *inflight, *rounds)
	fmt.Fprintf(stdout, "%-18s %10s %10s %10s %10s %10s\n", "shape", "msg_s", "kafka_us", "vs_bare", "prod_us", "rec/req")
	var bare float64
	for _, s := range shapes {
		m := medianResult(results[s.name])
		if s.name == "bare" {
			bare = m.kafkaUs
		}
		rel := "-"
		if bare > 0 {
			rel = fmt.Sprintf("%.2fx", m.kafkaUs/bare)
		}
		fmt.Fprintf(stdout, "%-18s %10.0f %10.3f %10s %10.3f %10.0f\n", s.name, m.rate, m.kafkaUs, rel, m.producerUs, m.perRequest)
	}
	return nil
}

func (s costShape) describe() string {
	hs := "no headers"
	if len(s.headers) > 0 {
		hs = strings.Join(s.headers, ",")
	}
	d := fmt.Sprintf("%-18s key=%v headers=%s", s.name, s.key, hs)
	if s.compression != "" {
		d += " compression=" + s.compression
	}
	if s.linger > 0 {
		d += " linger=" + s.linger.String()
	}
	if s.maxBatch > 0 {
		d += " max_batch=" + strconv.Itoa(s.maxBatch)
	}
	return d
}

func pickShapes(only string) ([]costShape, error) {
	if only == "" {
		return costShapes, nil
	}
	var out []costShape
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, s := range costShapes {
			if s.name == strings.TrimSpace(name) {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown shape %q (see -h)", name)
		}
	}
	return out, nil
}

type costRun struct {
	brokers     []string
	topicPrefix string
	topics      int
	count       int
	payload     int
	inflight    int
	kafkaPid    int
}

type costResult struct {
	seconds, rate, kafkaUs, producerUs, perRequest, load float64
}

// runShape writes r.count records of shape s and measures them.
func runShape(ctx context.Context, s costShape, r costRun) (costResult, error) {
	maxBatch := 1000 // kafka.max_batch's default
	if s.maxBatch > 0 {
		maxBatch = s.maxBatch
	}
	ring, err := ringbuffer.New[*producer.Record](65536)
	if err != nil {
		return costResult{}, err
	}
	perReq := prometheus.NewSummary(prometheus.SummaryOpts{Name: "records_per_request"})
	cfg := producer.Config{Acks: "all", AckTimeout: 30 * time.Second, Linger: s.linger, MaxBatch: maxBatch,
		MaxBatchBytes: 1 << 20, Compression: s.compression, Partitions: 1, ReplicationFactor: producer.ClusterReplicationFactor}
	client := &kafka.Client{Addr: kafka.TCP(r.brokers...), Timeout: 30 * time.Second, Transport: &kafka.Transport{}}
	p, err := producer.New(cfg, nil, client, ring, producer.Metrics{BatchSize: perReq})
	if err != nil {
		return costResult{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { p.Run(runCtx); close(done) }()

	var set topicmap.HeaderSet
	if len(s.headers) > 0 {
		if set, err = topicmap.ParseHeaderSet(s.headers); err != nil {
			return costResult{}, err
		}
	}
	hb := topicmap.NewHeaderBuilder(set, "ferry-0123456789abcdef")
	value := make([]byte, r.payload)
	type tp struct {
		kafka string
		mqtt  string
		key   []byte
	}
	tps := make([]tp, r.topics)
	for i := range tps {
		mt := fmt.Sprintf("bench/kafkacost/%d", i)
		tps[i] = tp{kafka: fmt.Sprintf("%s%d", r.topicPrefix, i), mqtt: mt, key: []byte(mt)}
	}
	// Create the topics (and learn their leaders) before the clock starts.
	if err := produceAll(ctx, ring, r.topics, func(i int) *producer.Record {
		return &producer.Record{Topic: tps[i].kafka, Value: value}
	}, r.inflight); err != nil {
		return costResult{}, err
	}
	mk := func(i int) *producer.Record {
		t := tps[i%r.topics]
		rec := &producer.Record{Topic: t.kafka, Value: value, Received: time.Now()}
		if s.key {
			rec.Key = t.key
		}
		if set != 0 {
			std := topicmap.Standard{Topic: t.mqtt, QoS: 1, ClientID: "bench-client-" + strconv.Itoa(i%r.topics), PacketID: uint16(i%65535 + 1), Seq: uint64(i + 1)}
			rec.Headers = topicmap.AppendStandard(hb, make([]kafka.Header, 0, hb.Count(std)), std)
		}
		return rec
	}
	load := load1()
	k0, err := procTicks(r.kafkaPid)
	if err != nil {
		return costResult{}, err
	}
	c0 := selfCPU()
	t0 := time.Now()
	if err := produceAll(ctx, ring, r.count, mk, r.inflight); err != nil {
		return costResult{}, err
	}
	el := time.Since(t0)
	c1 := selfCPU()
	k1, err := procTicks(r.kafkaPid)
	if err != nil {
		return costResult{}, err
	}
	ring.Close()
	<-done

	var m dto.Metric
	if err := perReq.Write(&m); err != nil {
		return costResult{}, err
	}
	reqs := float64(m.GetSummary().GetSampleCount())
	var perRequest float64
	if reqs > 0 {
		perRequest = m.GetSummary().GetSampleSum() / reqs
	}
	n := float64(r.count)
	return costResult{seconds: el.Seconds(), rate: n / el.Seconds(),
		kafkaUs: float64(k1-k0) / clkTck * 1e6 / n, producerUs: (c1 - c0).Seconds() * 1e6 / n,
		perRequest: perRequest, load: load}, nil
}

// produceAll pushes n records (mk(i)) with at most inflight waiting for Kafka,
// and returns when Kafka acknowledged all of them, or the first failure.
func produceAll(ctx context.Context, ring *ringbuffer.Ring[*producer.Record], n int, mk func(int) *producer.Record, inflight int) error {
	slots := make(chan struct{}, inflight)
	var failed atomic.Pointer[error]
	var left atomic.Int64
	left.Store(int64(n))
	all := make(chan struct{})
	deadline := time.Now().Add(5 * time.Minute)
	for i := 0; i < n; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e := failed.Load(); e != nil {
			return *e
		}
		rec := mk(i)
		rec.Deadline = deadline
		rec.Done = func(err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
			<-slots
			if left.Add(-1) == 0 {
				close(all)
			}
		}
		if err := ring.Push(ctx, rec); err != nil {
			return err
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

func medianResult(rs []costResult) costResult {
	pick := func(f func(costResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return costResult{rate: pick(func(r costResult) float64 { return r.rate }),
		kafkaUs:    pick(func(r costResult) float64 { return r.kafkaUs }),
		producerUs: pick(func(r costResult) float64 { return r.producerUs }),
		perRequest: pick(func(r costResult) float64 { return r.perRequest })}
}

// clkTck is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every architecture Go builds for).
const clkTck = 100

// procTicks is pid's user+system CPU so far, in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("kafka's CPU: %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("kafka's CPU: odd /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("kafka's CPU: short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("kafka's CPU: %w", err)
	}
	return ut + st, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// findKafkaPid is the one process on this machine whose command line runs
// kafka.Kafka.
func findKafkaPid() (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "kafka.Kafka") {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%d kafka.Kafka processes here (%v): name the broker with --kafka-pid", len(pids), pids)
	}
	return pids[0], nil
}

func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
