package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	createtopicsAPI "github.com/segmentio/kafka-go/protocol/createtopics"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/ferry-bridge/ferry/ringbuffer"
)

// fakeKafka is a fault-injecting kafka-go RoundTripper: it answers
// Metadata, CreateTopics and Produce the way kafka-go's Transport and a
// broker would, and lets a test make partitions fail. Like the real
// Transport it routes by a metadata cache: a produce request whose
// partitions have different cached leaders fails with "mismatching
// leaders", and a partition whose cached leader is not its real leader gets
// NOT_LEADER_OR_FOLLOWER. The cache is refreshed by an (empty) CreateTopics
// request, which is what kafka-go does after CreateTopics, or after ttl.
type fakeKafka struct {
	mu          sync.Mutex
	topics      map[string]*fakeTopic
	ttl         time.Duration
	refreshedAt time.Time
	refreshes   int
	partitions  int // for created topics

	// partFault, when set, decides each partition's error code before the
	// records are stored (0 = store them).
	partFault func(topic string, part int32, recs []fakeRec) int16
	// reqFault, when set, may fail or delay a whole request.
	reqFault func(ctx context.Context, req *produceAPI.Request) error

	requests  []fakeReq
	written   []string        // values in the order they were stored, all partitions
	inflight  map[string]bool // "topic/partition" in a request now
	violation string          // first breach of one-in-flight-per-partition
}

type fakeTopic struct {
	cached, real []int32 // leader per partition
	logs         [][]fakeRec
}

type fakeRec struct{ key, value string }

// fakeReq is what one produce request carried.
type fakeReq struct {
	topics, partitions int
}

func newFakeKafka() *fakeKafka {
	return &fakeKafka{topics: make(map[string]*fakeTopic), ttl: time.Hour, refreshedAt: time.Now(),
		partitions: 1, inflight: make(map[string]bool)}
}

// addTopic creates a topic with the given leaders (cached = real).
func (f *fakeKafka) addTopic(name string, leaders ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = &fakeTopic{cached: append([]int32(nil), leaders...), real: append([]int32(nil), leaders...),
		logs: make([][]fakeRec, len(leaders))}
}

// moveLeader changes a partition's real leader; the cache learns it on the
// next refresh.
func (f *fakeKafka) moveLeader(topic string, part int, leader int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[topic].real[part] = leader
}

// addPartitions adds partitions led by leaders to a topic, as Kafka's
// CreatePartitions does; the cache learns them on the next refresh.
func (f *fakeKafka) addPartitions(topic string, leaders ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	t.real = append(t.real, leaders...)
	t.logs = append(t.logs, make([][]fakeRec, len(leaders))...)
}

// writeOrder returns every stored value in the order it was stored.
func (f *fakeKafka) writeOrder() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.written...)
}

func (f *fakeKafka) log(topic string, part int) []fakeRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	if t == nil {
		return nil
	}
	return append([]fakeRec(nil), t.logs[part]...)
}

func (f *fakeKafka) stats() (refreshes int, reqs []fakeReq, violation string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes, append([]fakeReq(nil), f.requests...), f.violation
}

func (f *fakeKafka) refreshLocked() {
	for _, t := range f.topics {
		t.cached = append(t.cached[:0], t.real...)
	}
	f.refreshes++
	f.refreshedAt = time.Now()
}

func (f *fakeKafka) RoundTrip(ctx context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	f.mu.Lock()
	if time.Since(f.refreshedAt) > f.ttl {
		f.refreshLocked()
		f.refreshes-- // not forced
	}
	f.mu.Unlock()
	switch req := msg.(type) {
	case *metadataAPI.Request:
		return f.metadata(req), nil
	case *createtopicsAPI.Request:
		return f.createTopics(req), nil
	case *produceAPI.Request:
		return f.produce(ctx, req)
	}
	return nil, fmt.Errorf("fakeKafka: unexpected request %T", msg)
}

func (f *fakeKafka) metadata(req *metadataAPI.Request) *metadataAPI.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &metadataAPI.Response{Brokers: []metadataAPI.ResponseBroker{{NodeID: 1}, {NodeID: 2}, {NodeID: 3}}, ControllerID: 1}
	for _, name := range req.TopicNames {
		t := f.topics[name]
		if t == nil {
			res.Topics = append(res.Topics, metadataAPI.ResponseTopic{Name: name, ErrorCode: int16(kafka.UnknownTopicOrPartition)})
			continue
		}
		rt := metadataAPI.ResponseTopic{Name: name}
		for i, l := range t.cached {
			rp := metadataAPI.ResponsePartition{PartitionIndex: int32(i), LeaderID: l}
			if l < 0 {
				rp.ErrorCode = int16(kafka.LeaderNotAvailable)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		res.Topics = append(res.Topics, rt)
	}
	return res
}

func (f *fakeKafka) createTopics(req *createtopicsAPI.Request) *createtopicsAPI.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &createtopicsAPI.Response{}
	for _, rt := range req.Topics {
		if f.topics[rt.Name] != nil {
			res.Topics = append(res.Topics, createtopicsAPI.ResponseTopic{Name: rt.Name, ErrorCode: int16(kafka.TopicAlreadyExists)})
			continue
		}
		leaders := make([]int32, f.partitions)
		for i := range leaders {
			leaders[i] = 1
		}
		f.topics[rt.Name] = &fakeTopic{cached: leaders, real: append([]int32(nil), leaders...), logs: make([][]fakeRec, len(leaders))}
		res.Topics = append(res.Topics, createtopicsAPI.ResponseTopic{Name: rt.Name})
	}
	f.refreshLocked()
	return res
}

func (f *fakeKafka) produce(ctx context.Context, req *produceAPI.Request) (protocol.Message, error) {
	// Route like Transport: every partition's cached leader must agree.
	f.mu.Lock()
	leader := int32(-1)
	parts := 0
	for _, rt := range req.Topics {
		t := f.topics[rt.Topic]
		for _, rp := range rt.Partitions {
			parts++
			if t == nil || int(rp.Partition) >= len(t.cached) || t.cached[rp.Partition] < 0 {
				f.mu.Unlock()
				return nil, produceAPI.NewError(protocol.NewErrNoLeader(rt.Topic, rp.Partition))
			}
			if l := t.cached[rp.Partition]; leader < 0 {
				leader = l
			} else if l != leader {
				f.mu.Unlock()
				return nil, produceAPI.NewError(fmt.Errorf("mismatching leaders (%d!=%d)", l, leader))
			}
			k := fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)
			if f.inflight[k] && f.violation == "" {
				f.violation = "two requests in flight for " + k
			}
			f.inflight[k] = true
		}
	}
	f.requests = append(f.requests, fakeReq{topics: len(req.Topics), partitions: parts})
	reqFault, partFault := f.reqFault, f.partFault
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				delete(f.inflight, fmt.Sprintf("%s/%d", rt.Topic, rp.Partition))
			}
		}
		f.mu.Unlock()
	}()
	if reqFault != nil {
		if err := reqFault(ctx, req); err != nil {
			return nil, err
		}
	}
	res := &produceAPI.Response{}
	for _, rt := range req.Topics {
		out := produceAPI.ResponseTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			recs, err := readRecords(rp.RecordSet.Records)
			if err != nil {
				return nil, err
			}
			var code int16
			f.mu.Lock()
			t := f.topics[rt.Topic]
			if t.cached[rp.Partition] != t.real[rp.Partition] {
				code = int16(kafka.NotLeaderForPartition)
			}
			f.mu.Unlock()
			if code == 0 && partFault != nil {
				code = partFault(rt.Topic, rp.Partition, recs)
			}
			if code == 0 {
				f.mu.Lock()
				t.logs[rp.Partition] = append(t.logs[rp.Partition], recs...)
				for _, r := range recs {
					f.written = append(f.written, r.value)
				}
				f.mu.Unlock()
			}
			out.Partitions = append(out.Partitions, produceAPI.ResponsePartition{Partition: rp.Partition, ErrorCode: code})
		}
		res.Topics = append(res.Topics, out)
	}
	return res, nil
}

func readRecords(rr protocol.RecordReader) ([]fakeRec, error) {
	var out []fakeRec
	for {
		r, err := rr.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		k, _ := protocol.ReadAll(r.Key)
		v, _ := protocol.ReadAll(r.Value)
		out = append(out, fakeRec{key: string(k), value: string(v)})
	}
}

// prodHarness runs a producer against a fakeKafka.
type prodHarness struct {
	t    *testing.T
	p    *producer
	ring *ringbuffer.Ring[*record]
	fk   *fakeKafka
	reg  *prometheus.Registry
	cfg  KafkaConfig
}

func newProdHarness(t *testing.T, fk *fakeKafka, ringCap int, mod func(*KafkaConfig)) *prodHarness {
	t.Helper()
	return newProdHarnessRT(t, fk, []string{"127.0.0.1:1"}, ringCap, mod)
}

// newProdHarnessRT runs the producer over any RoundTripper (a real Kafka's
// Transport too).
func newProdHarnessRT(t *testing.T, rt kafka.RoundTripper, brokers []string, ringCap int, mod func(*KafkaConfig)) *prodHarness {
	t.Helper()
	cfg := DefaultConfig().Kafka
	cfg.Brokers = brokers
	cfg.AckTimeout = 10 * time.Second // generous: the tests must hold on a loaded machine
	if mod != nil {
		mod(&cfg)
	}
	fk, _ := rt.(*fakeKafka)
	ring, err := ringbuffer.New[*record](ringCap)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, func() float64 { return float64(ring.Len()) }, func() float64 { return float64(ring.Cap()) })
	if err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: rt, Timeout: cfg.AckTimeout}
	log := testLogger(t)
	p, err := newProducer(cfg, log, client, newTopicManager(cfg, log, client, m), ring, m)
	if err != nil {
		t.Fatal(err)
	}
	return &prodHarness{t: t, p: p, ring: ring, fk: fk, reg: reg, cfg: cfg}
}

// start runs the producer until the test ends.
func (h *prodHarness) start() {
	hard, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.p.run(hard)
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
func (h *prodHarness) rec(topic, key, value string, qos int, timeout time.Duration) (*record, outcome) {
	now := time.Now()
	r := &record{topic: topic, key: []byte(key), value: []byte(value), received: now}
	o := outcome{c: make(chan error, 1), at: make(chan time.Time, 1)}
	if qos > 0 {
		r.deadline = now.Add(timeout)
		r.done = func(err error) { o.at <- time.Now(); o.c <- err }
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

func (h *prodHarness) push(r *record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.ring.Push(ctx, r); err != nil {
		h.t.Fatalf("ring push: %v", err)
	}
}

func values(recs []fakeRec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.value
	}
	return out
}
