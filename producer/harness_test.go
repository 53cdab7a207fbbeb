package producer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
	"github.com/ferry-bridge/ferry/internal/testhelp"
	"github.com/ferry-bridge/ferry/ringbuffer"
)

// prodHarness runs a producer against a fakekafka.Kafka.
type prodHarness struct {
	t    *testing.T
	p    *Producer
	ring *ringbuffer.Ring[*Record]
	fk   *fakekafka.Kafka
	m    Metrics
	cfg  Config
}

// testConfig is the producer config of the bridge's defaults, with a
// generous ack timeout: the tests must hold on a loaded machine.
func testConfig() Config {
	return Config{Acks: "all", AckTimeout: 10 * time.Second, MaxBatch: 1000, MaxBatchBytes: 1 << 20,
		Compression: "none", Partitions: 1, ReplicationFactor: ClusterReplicationFactor, MaxCreatedTopics: 1000}
}

// testMetrics are fresh, unregistered collectors.
func testMetrics() Metrics {
	return Metrics{
		RecordsProduced: prometheus.NewCounter(prometheus.CounterOpts{Name: "records_produced"}),
		ProduceErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "produce_errors"}),
		Dropped:         prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"}),
		TopicsCreated:   prometheus.NewCounter(prometheus.CounterOpts{Name: "topics_created"}),
		BatchSize:       prometheus.NewHistogram(prometheus.HistogramOpts{Name: "batch_size"}),
		ProduceLatency:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "produce_latency"}),
		PublishToAck:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "publish_to_ack"}),
		Held:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "held"}),
		Topics:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "topics"}),
	}
}

// metricValue reads a counter or gauge of testMetrics.
func metricValue(c prometheus.Collector) float64 {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		panic(fmt.Sprintf("metricValue: %d families, %v", len(mfs), err))
	}
	m := mfs[0].GetMetric()[0]
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func newProdHarness(t *testing.T, fk *fakekafka.Kafka, ringCap int, mod func(*Config)) *prodHarness {
	t.Helper()
	return newProdHarnessRT(t, fk, []string{"127.0.0.1:1"}, ringCap, mod)
}

// newProdHarnessRT runs the producer over any RoundTripper (a real Kafka's
// Transport too).
func newProdHarnessRT(t *testing.T, rt kafka.RoundTripper, brokers []string, ringCap int, mod func(*Config)) *prodHarness {
	t.Helper()
	cfg := testConfig()
	if mod != nil {
		mod(&cfg)
	}
	fk, _ := rt.(*fakekafka.Kafka)
	ring, err := ringbuffer.New[*Record](ringCap)
	if err != nil {
		t.Fatal(err)
	}
	m := testMetrics()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: rt, Timeout: cfg.AckTimeout}
	p, err := New(cfg, testhelp.Logger(t), client, ring, m)
	if err != nil {
		t.Fatal(err)
	}
	return &prodHarness{t: t, p: p, ring: ring, fk: fk, m: m, cfg: cfg}
}

// start runs the producer until the test ends.
func (h *prodHarness) start() {
	hard, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.p.Run(hard)
	}()
	h.t.Cleanup(func() {
		h.ring.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			h.t.Error("producer did not stop within 10s")
		}
	})
}

// outcome is the result of one record.
type outcome struct {
	c  chan error
	at chan time.Time
}

func (o outcome) wait(t *testing.T, within time.Duration) (error, time.Time) {
	t.Helper()
	select {
	case err := <-o.c:
		return err, <-o.at
	case <-time.After(within):
		t.Fatalf("no outcome within %s", within)
		return nil, time.Time{}
	}
}

// rec builds a record; qos 0 has no deadline and no outcome channel.
func (h *prodHarness) rec(topic, key, value string, qos int, timeout time.Duration) (*Record, outcome) {
	now := time.Now()
	r := &Record{Topic: topic, Key: []byte(key), Value: []byte(value), Received: now}
	o := outcome{c: make(chan error, 1), at: make(chan time.Time, 1)}
	if qos > 0 {
		r.Deadline = now.Add(timeout)
		r.Done = func(err error) { o.at <- time.Now(); o.c <- err }
	}
	return r, o
}

// send pushes a record into the ring.
func (h *prodHarness) send(topic, key, value string, qos int) outcome {
	h.t.Helper()
	r, o := h.rec(topic, key, value, qos, h.cfg.AckTimeout)
	h.push(r)
	return o
}

func (h *prodHarness) push(r *Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.ring.Push(ctx, r); err != nil {
		h.t.Fatalf("ring push: %v", err)
	}
}
