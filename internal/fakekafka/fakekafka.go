// Package fakekafka is a fault-injecting kafka-go RoundTripper for tests:
// it answers Metadata, CreateTopics and Produce the way kafka-go's Transport
// and a broker would, and lets a test make requests or partitions fail.
package fakekafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	createtopicsAPI "github.com/segmentio/kafka-go/protocol/createtopics"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// Kafka is a fault-injecting kafka-go RoundTripper: it answers
// Metadata, CreateTopics and Produce the way kafka-go's Transport and a
// broker would, and lets a test make partitions fail. Like the real
// Transport it routes by a metadata cache: a produce request whose
// partitions have different cached leaders fails with "mismatching
// leaders", and a partition whose cached leader is not its real leader gets
// NOT_LEADER_OR_FOLLOWER. The cache is refreshed by an (empty) CreateTopics
// request, which is what kafka-go does after CreateTopics, or after TTL.
type Kafka struct {
	mu          sync.Mutex
	topics      map[string]*topicState
	TTL         time.Duration // the metadata cache is refreshed after this (default an hour)
	refreshedAt time.Time
	refreshes   int
	Partitions  int // of the topics CreateTopics creates (default 1)

	// PartFault, when set, decides each partition's error code before the
	// records are stored (0 = store them).
	PartFault func(topic string, part int32, recs []Rec) int16
	// ReqFault, when set, may fail or delay a whole request.
	ReqFault func(ctx context.Context, req *produceAPI.Request) error

	requests  []Req
	written   []string        // values in the order they were stored, all partitions
	inflight  map[string]bool // "topic/partition" in a request now
	violation string          // first breach of one-in-flight-per-partition
}

type topicState struct {
	cached, real []int32 // leader per partition
	logs         [][]Rec
}

// Rec is one stored record.
type Rec struct{ Key, Value string }

// Req is what one produce request carried.
type Req struct {
	Topics, Partitions int
}

// New returns a fake Kafka of three brokers (ids 1, 2 and 3) and no topics.
func New() *Kafka {
	return &Kafka{topics: make(map[string]*topicState), TTL: time.Hour, refreshedAt: time.Now(),
		Partitions: 1, inflight: make(map[string]bool)}
}

// AddTopic creates a topic with the given leaders (cached = real).
func (f *Kafka) AddTopic(name string, leaders ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = &topicState{cached: append([]int32(nil), leaders...), real: append([]int32(nil), leaders...),
		logs: make([][]Rec, len(leaders))}
}

// MoveLeader changes a partition's real leader; the cache learns it on the
// next refresh.
func (f *Kafka) MoveLeader(topic string, part int, leader int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[topic].real[part] = leader
}

// AddPartitions adds partitions led by leaders to a topic, as Kafka's
// CreatePartitions does; the cache learns them on the next refresh.
func (f *Kafka) AddPartitions(topic string, leaders ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	t.real = append(t.real, leaders...)
	t.logs = append(t.logs, make([][]Rec, len(leaders))...)
}

// WriteOrder returns every stored value in the order it was stored.
func (f *Kafka) WriteOrder() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.written...)
}

// Log returns what partition part of topic stores.
func (f *Kafka) Log(topic string, part int) []Rec {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	if t == nil {
		return nil
	}
	return append([]Rec(nil), t.logs[part]...)
}

// Stats returns the forced metadata refreshes, what each produce request
// carried, and the first breach of one request in flight per partition.
func (f *Kafka) Stats() (refreshes int, reqs []Req, violation string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes, append([]Req(nil), f.requests...), f.violation
}

func (f *Kafka) refreshLocked() {
	for _, t := range f.topics {
		t.cached = append(t.cached[:0], t.real...)
	}
	f.refreshes++
	f.refreshedAt = time.Now()
}

// RoundTrip implements kafka.RoundTripper.
func (f *Kafka) RoundTrip(ctx context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	f.mu.Lock()
	if time.Since(f.refreshedAt) > f.TTL {
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
	case *rawproduce.Request:
		dec, err := decodeRaw(req)
		if err != nil {
			return nil, err
		}
		return f.produce(ctx, dec)
	}
	return nil, fmt.Errorf("fakekafka: unexpected request %T", msg)
}

func (f *Kafka) metadata(req *metadataAPI.Request) *metadataAPI.Response {
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

func (f *Kafka) createTopics(req *createtopicsAPI.Request) *createtopicsAPI.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &createtopicsAPI.Response{}
	for _, rt := range req.Topics {
		if f.topics[rt.Name] != nil {
			res.Topics = append(res.Topics, createtopicsAPI.ResponseTopic{Name: rt.Name, ErrorCode: int16(kafka.TopicAlreadyExists)})
			continue
		}
		leaders := make([]int32, f.Partitions)
		for i := range leaders {
			leaders[i] = 1
		}
		f.topics[rt.Name] = &topicState{cached: leaders, real: append([]int32(nil), leaders...), logs: make([][]Rec, len(leaders))}
		res.Topics = append(res.Topics, createtopicsAPI.ResponseTopic{Name: rt.Name})
	}
	f.refreshLocked()
	return res
}

func (f *Kafka) produce(ctx context.Context, req *produceAPI.Request) (protocol.Message, error) {
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
	f.requests = append(f.requests, Req{Topics: len(req.Topics), Partitions: parts})
	ReqFault, PartFault := f.ReqFault, f.PartFault
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
	if ReqFault != nil {
		if err := ReqFault(ctx, req); err != nil {
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
			if code == 0 && PartFault != nil {
				code = PartFault(rt.Topic, rp.Partition, recs)
			}
			if code == 0 {
				f.mu.Lock()
				t.logs[rp.Partition] = append(t.logs[rp.Partition], recs...)
				for _, r := range recs {
					f.written = append(f.written, r.Value)
				}
				f.mu.Unlock()
			}
			out.Partitions = append(out.Partitions, produceAPI.ResponsePartition{Partition: rp.Partition, ErrorCode: code})
		}
		res.Topics = append(res.Topics, out)
	}
	return res, nil
}

// decodeRaw is req with its pre-encoded record sets decoded, after the checks
// a broker makes of each: one v2 record batch whose sizes add up and whose
// CRC-32C is right (a broker refuses a corrupt batch with CORRUPT_MESSAGE).
func decodeRaw(req *rawproduce.Request) (*produceAPI.Request, error) {
	out := &produceAPI.Request{TransactionalID: req.TransactionalID, Acks: req.Acks, Timeout: req.Timeout}
	for _, rt := range req.Topics {
		ot := produceAPI.RequestTopic{Topic: rt.Topic}
		for _, rp := range rt.Partitions {
			if rp.RecordSet.Reader == nil {
				return nil, fmt.Errorf("fakekafka: %s/%d: no record set", rt.Topic, rp.Partition)
			}
			b, err := io.ReadAll(rp.RecordSet.Reader)
			if err != nil {
				return nil, err
			}
			if err := CheckBatch(b); err != nil {
				return nil, fmt.Errorf("fakekafka: %s/%d: %w", rt.Topic, rp.Partition, err)
			}
			var rs protocol.RecordSet
			if _, err := rs.ReadFrom(bytes.NewReader(b)); err != nil {
				return nil, fmt.Errorf("fakekafka: %s/%d: decoding: %w", rt.Topic, rp.Partition, err)
			}
			ot.Partitions = append(ot.Partitions, produceAPI.RequestPartition{Partition: rp.Partition, RecordSet: rs})
		}
		out.Topics = append(out.Topics, ot)
	}
	return out, nil
}

// CheckBatch checks a produce request partition's record set b (its int32
// size, then record batches) as a broker does: magic 2, every batch's
// length inside the set, its CRC-32C over attributes to end.
func CheckBatch(b []byte) error {
	if len(b) < 4 || int(binary.BigEndian.Uint32(b)) != len(b)-4 {
		return fmt.Errorf("record set size does not match its %d bytes", len(b))
	}
	b = b[4:]
	if len(b) == 0 {
		return errors.New("empty record set")
	}
	for len(b) > 0 {
		if len(b) < 61 {
			return fmt.Errorf("record batch of %d bytes: shorter than its header", len(b))
		}
		n := int(binary.BigEndian.Uint32(b[8:])) + 12
		if n < 61 || n > len(b) {
			return fmt.Errorf("record batch length %d outside the set's %d bytes", n, len(b))
		}
		if b[16] != 2 {
			return fmt.Errorf("record batch magic %d, want 2", b[16])
		}
		if got, want := crc32.Checksum(b[21:n], crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(b[17:]); got != want {
			return fmt.Errorf("record batch CRC %08x, computed %08x", want, got)
		}
		b = b[n:]
	}
	return nil
}

func readRecords(rr protocol.RecordReader) ([]Rec, error) {
	var out []Rec
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
		out = append(out, Rec{Key: string(k), Value: string(v)})
	}
}

// Stale reports whether the cached leader of topic's partition part is not
// its real one (MoveLeader since the last refresh).
func (f *Kafka) Stale(topic string, part int32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	return t != nil && int(part) < len(t.cached) && t.cached[part] != t.real[part]
}

// Values returns the values of recs.
func Values(recs []Rec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Value
	}
	return out
}
