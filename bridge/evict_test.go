package bridge

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/ringbuffer"
)

// Finding 5, drop-oldest: a QoS 0 publish evicts the oldest record of the
// ring, a waiting QoS 1 publish; the later QoS 1 publish of the same key
// fails too instead of overtaking it (the hook reports the eviction to the
// producer: producer.Failed).
func TestDropOldestEvictionKeepsKeyOrder(t *testing.T) {
	fk := fakekafka.New()
	fk.AddTopic("t", 1)
	cfg := DefaultConfig()
	cfg.Ring.QoS0Policy = "drop-oldest"
	cfg.Kafka.AckTimeout = 10 * time.Second
	ring, err := ringbuffer.New[*producer.Record](2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Transport: fk, Timeout: cfg.Kafka.AckTimeout}
	p, err := producer.New(cfg.Kafka.producerConfig(), testLogger(t), client, ring, m.producer())
	if err != nil {
		t.Fatal(err)
	}
	hk := &hook{cfg: cfg, ring: ring, metrics: m, producer: p}
	rec := func(key, value string, qos int) (*producer.Record, chan error) {
		r := &producer.Record{Topic: "t", Key: []byte(key), Value: []byte(value), Received: time.Now()}
		out := make(chan error, 1)
		if qos > 0 {
			r.Deadline = r.Received.Add(5 * time.Second)
			r.Done = func(err error) { out <- err }
		}
		return r, out
	}
	wait := func(out chan error, within time.Duration) error {
		t.Helper()
		select {
		case err := <-out:
			return err
		case <-time.After(within):
			t.Fatalf("no outcome within %s", within)
			return nil
		}
	}
	k1, o1 := rec("k", "k1", 1)
	k2, o2 := rec("k", "k2", 1)
	for _, r := range []*producer.Record{k1, k2} {
		if !ring.TryPush(r) {
			t.Fatal("ring full")
		}
	}
	q0, _ := rec("z", "q0", 0)
	hk.enqueueQoS0(q0) // ring full: evicts k1
	if err := wait(o1, time.Second); !errors.Is(err, ErrRingFull) {
		t.Fatalf("evicted k1: %v", err)
	}
	hard, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(hard)
	}()
	t.Cleanup(func() {
		ring.Close()
		cancel()
		<-done
	})
	if err := wait(o2, 15*time.Second); err == nil {
		t.Fatal("k2 was produced after k1 of the same key was evicted: it overtook k1")
	}
	waitFor(t, 15*time.Second, "q0 in Kafka", func() bool { return len(fk.Log("t", 0)) == 1 })
	if got := fakekafka.Values(fk.Log("t", 0)); !slices.Equal(got, []string{"q0"}) {
		t.Fatalf("Kafka has %q, want [q0]", got)
	}
}
