package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/probe"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// arrivals is what one side (MQTT or Kafka) saw, in order.
type arrivals struct {
	mu    sync.Mutex
	ns    []int64  // MQTT: arrival time; Kafka: record timestamp (CreateTime)
	sum   []uint32 // payload checksum, to check the join
	bytes int
	last  time.Time
}

func newArrivals(n int) *arrivals {
	return &arrivals{ns: make([]int64, 0, n), sum: make([]uint32, 0, n)}
}

func (a *arrivals) add(ns int64, payload []byte) {
	h := fnv.New32a()
	h.Write(payload)
	a.mu.Lock()
	a.ns = append(a.ns, ns)
	a.sum = append(a.sum, h.Sum32())
	if a.bytes == 0 {
		a.bytes = len(payload)
	}
	a.last = time.Now()
	a.mu.Unlock()
}

func (a *arrivals) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ns)
}

// runRecv is the receiving side of reference test 2 when
// kafka-producer-perf-test produces: its payloads carry no probe stamp, so
// the latency of record i is (arrival of the i-th MQTT message) - (timestamp
// of the i-th record of the partition), the reference's "arrival time -
// record timestamp". The join by order is valid for one partition delivered
// in order at QoS >= 1 and is checked with payload checksums (mismatches are
// reported in the status column). Record timestamps are CreateTime in whole
// milliseconds (the Java producer's clock), so each sample over-states the
// latency by 0..1 ms.
func runRecv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("recv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mqttURL := fs.String("mqtt", "tcp://127.0.0.1:1883", "MQTT broker URL")
	topic := fs.String("topic", "", "MQTT topic the bridge publishes the records on")
	qos := fs.Int("qos", 1, "subscription QoS")
	brokers := fs.String("kafka", "127.0.0.1:9092", "Kafka bootstrap brokers")
	kTopic := fs.String("kafka-topic", "", "Kafka topic (one partition) the records are produced to")
	count := fs.Int("count", 0, "records expected")
	rate := fs.Float64("rate", 0, "the producer's rate (recorded in the CSV only)")
	idle := fs.Duration("timeout", 15*time.Second, "stop when nothing arrived for this long")
	readyFile := fs.String("ready-file", "", "create this file once subscribed and positioned")
	csvPath := fs.String("csv", "", "write the probe's CSV columns here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *topic == "" || *kTopic == "" || *count <= 0 {
		return fmt.Errorf("%w: --topic, --kafka-topic and --count are required", errUsage)
	}
	n := *count

	adm, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, *kTopic)
	adm.Close()
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", *kTopic, err)
	}
	end, ok := ends.Lookup(*kTopic, 0)
	if !ok || end.Err != nil {
		return fmt.Errorf("end offset of %s[0]: %v", *kTopic, end.Err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*kTopic: {0: kgo.NewOffset().At(end.Offset)}}))
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer cons.Close()
	recs := newArrivals(n)
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cctx.Err() == nil {
			f := cons.PollFetches(cctx)
			if f.IsClientClosed() {
				return
			}
			f.EachRecord(func(r *kgo.Record) { recs.add(r.Timestamp.UnixNano(), r.Value) })
		}
	}()
	defer func() { stop(); wg.Wait() }()

	msgs := newArrivals(n)
	opts := paho.NewClientOptions().AddBroker(*mqttURL).SetClientID(fmt.Sprintf("benchkit-recv-%d", os.Getpid())).
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true).SetConnectTimeout(5 * time.Second)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("connect %s: %v", *mqttURL, tok.Error())
	}
	defer c.Disconnect(100)
	tok := c.Subscribe(*topic, byte(*qos), func(_ paho.Client, m paho.Message) {
		msgs.add(time.Now().UnixNano(), m.Payload())
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("subscribe %s: %v", *topic, tok.Error())
	}
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, nil, 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}

	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for msgs.len() < n || recs.len() < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		msgs.mu.Lock()
		last := msgs.last
		msgs.mu.Unlock()
		if last.IsZero() {
			last = start
		}
		if time.Since(last) > *idle {
			break
		}
	}
	stop()
	wg.Wait()

	row := joinByOrder(msgs, recs, n)
	row.QoS, row.Rate, row.Clients, row.Subscribers = *qos, *rate, 1, 1
	out := stdout
	if *csvPath != "" {
		f, err := os.Create(*csvPath)
		if err != nil {
			return fmt.Errorf("csv: %w", err)
		}
		defer f.Close()
		out = f
	}
	if err := probe.WriteCSV(out, []probe.Row{row}); err != nil {
		return err
	}
	if row.Counts.Lost() > 0 {
		return fmt.Errorf("%d of %d records not received on MQTT: %w", row.Counts.Lost(), n, errLost)
	}
	return nil
}

// errLost means records were not received.
var errLost = errors.New("lost")

// joinByOrder pairs the i-th MQTT arrival with the i-th Kafka record.
func joinByOrder(msgs, recs *arrivals, n int) probe.Row {
	msgs.mu.Lock()
	defer msgs.mu.Unlock()
	recs.mu.Lock()
	defer recs.mu.Unlock()
	m := min(len(msgs.ns), len(recs.ns), n)
	lat := stats.NewLatency()
	mismatch := 0
	for i := 0; i < m; i++ {
		lat.Record(msgs.ns[i] - recs.ns[i])
		if msgs.sum[i] != recs.sum[i] {
			mismatch++
		}
	}
	row := probe.Row{
		Direction: probe.KafkaToMQTT, Metric: probe.MetricE2E,
		Counts:       stats.Counts{Expected: int64(n), Received: int64(m), Duplicated: int64(max(0, len(msgs.ns)-len(recs.ns)))},
		Figures:      lat.Figures(),
		Available:    m > 0,
		Negative:     lat.Negative(),
		PayloadBytes: recs.bytes,
		Status: fmt.Sprintf("joined by order: %d mqtt arrivals, %d kafka records, %d payload mismatches; CreateTime ms resolution",
			len(msgs.ns), len(recs.ns), mismatch),
	}
	if m > 1 && msgs.ns[m-1] > recs.ns[0] {
		row.ThroughputMsgS = float64(m) * 1e9 / float64(msgs.ns[m-1]-recs.ns[0])
	}
	return row
}
