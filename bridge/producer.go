package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/ringbuffer"
)

// record is one MQTT publish on its way to Kafka.
type record struct {
	topic   string
	key     []byte
	value   []byte
	headers []kafka.Header
	// received is when the broker accepted the publish; it is the record
	// timestamp (CreateTime) and the start of the produce-latency metric.
	received time.Time
	// deadline is when a waiting MQTT client gives up; zero for QoS 0,
	// which waits for Kafka as long as the bridge runs.
	deadline time.Time
	// done reports the outcome exactly once; nil for QoS 0.
	done func(error)
}

func (r *record) size() int {
	n := len(r.key) + len(r.value) + 64
	for _, h := range r.headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

func (r *record) complete(err error) {
	if r.done != nil {
		r.done(err)
	}
}

// producer drains the ring and writes to Kafka. It is the batcher of the
// design: a batch leaves as soon as the ring runs dry (or is full), never on
// a timer. Each Kafka topic has a lane; a lane keeps at most one produce
// request in flight per partition, so records of one key stay in order.
type producer struct {
	cfg     KafkaConfig
	log     *slog.Logger
	client  *kafka.Client
	topics  *topicManager
	ring    *ringbuffer.Ring[*record]
	metrics *metrics
	codec   kafka.Compression
	acks    kafka.RequiredAcks

	mu    sync.Mutex
	lanes map[string]*lane
	wg    sync.WaitGroup
}

func newProducer(cfg KafkaConfig, log *slog.Logger, client *kafka.Client, topics *topicManager, ring *ringbuffer.Ring[*record], m *metrics) (*producer, error) {
	codec, err := compressionCodec(cfg.Compression)
	if err != nil {
		return nil, err
	}
	acks := kafka.RequireAll
	switch cfg.Acks {
	case "one":
		acks = kafka.RequireOne
	case "none":
		acks = kafka.RequireNone
	}
	return &producer{cfg: cfg, log: log, client: client, topics: topics, ring: ring, metrics: m,
		codec: codec, acks: acks, lanes: make(map[string]*lane)}, nil
}

// run moves records from the ring to the lanes until the ring is closed and
// empty; then it waits for the lanes to flush. hard is cancelled when the
// shutdown timeout has passed: pending records then fail.
func (p *producer) run(hard context.Context) {
	buf := make([]*record, p.cfg.MaxBatch)
	for {
		n, err := p.ring.PopBatch(context.Background(), buf)
		for i := 0; i < n; i++ {
			p.lane(hard, buf[i].topic).add(hard, buf[i])
			buf[i] = nil
		}
		if err != nil {
			break // closed and drained
		}
	}
	p.mu.Lock()
	for _, l := range p.lanes {
		l.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *producer) lane(ctx context.Context, topic string) *lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.lanes[topic]
	if !ok {
		l = &lane{p: p, topic: topic, wake: make(chan struct{}, 1), space: make(chan struct{}, 1),
			limit: 4 * p.cfg.MaxBatch}
		p.lanes[topic] = l
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			l.run(ctx)
		}()
	}
	return l
}

// lane owns the records bound for one Kafka topic.
type lane struct {
	p     *producer
	topic string
	limit int

	mu      sync.Mutex
	pending []*record
	held    int // records taken by run and not yet finished
	closed  bool
	wake    chan struct{}
	space   chan struct{}
}

// add appends r, waiting while the lane holds its limit (pending plus
// in-flight or waiting for retry): the ring behind it then fills, which is
// the backpressure MQTT clients feel, and memory stays bounded while Kafka
// is away.
func (l *lane) add(ctx context.Context, r *record) {
	for {
		l.mu.Lock()
		if len(l.pending)+l.held < l.limit || ctx.Err() != nil {
			l.pending = append(l.pending, r)
			l.mu.Unlock()
			notify(l.wake)
			return
		}
		l.mu.Unlock()
		select {
		case <-l.space:
		case <-ctx.Done():
		}
	}
}

func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	notify(l.wake)
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// take hands the pending records to run; held is what run still holds.
func (l *lane) take(held int) (recs []*record, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, l.pending = l.pending, nil
	if held < l.held {
		notify(l.space) // records finished: room for add
	}
	l.held = held + len(recs)
	return recs, l.closed
}

func (l *lane) run(ctx context.Context) {
	var backlog []*record
	for {
		recs, closed := l.take(len(backlog))
		backlog = append(backlog, recs...)
		if len(backlog) == 0 {
			if closed {
				return
			}
			select {
			case <-l.wake:
			case <-ctx.Done():
				// keep looping: take() still drains what producers add.
				if closed {
					return
				}
				<-l.wake
			}
			continue
		}
		if l.p.cfg.Linger > 0 && len(backlog) < l.p.cfg.MaxBatch && !closed {
			t := time.NewTimer(l.p.cfg.Linger)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			more, _ := l.take(len(backlog))
			backlog = append(backlog, more...)
		}
		backlog = l.flush(ctx, backlog)
		if len(backlog) > 0 {
			// Kafka is not reachable or the topic is not ready: wait a
			// little before the next try, failing what timed out.
			if !sleepCtx(ctx, retryBackoff) {
				failAll(backlog, fmt.Errorf("%w: shutting down", ErrKafkaUnavailable))
				l.p.metrics.produceErrors.Add(float64(len(backlog)))
				backlog = nil
			}
		}
	}
}

const retryBackoff = 100 * time.Millisecond

// flush writes recs to their partitions and returns those that must be
// retried later (when the topic's partitions are not known yet).
func (l *lane) flush(ctx context.Context, recs []*record) []*record {
	recs = l.p.dropExpired(recs)
	if len(recs) == 0 {
		return nil
	}
	nparts, err := l.p.topics.partitions(ctx, l.topic)
	if err != nil {
		if errors.Is(err, ErrTopicRejected) {
			l.p.log.Warn("topic rejected", "topic", l.topic, "err", err)
			failAll(recs, err)
			l.p.metrics.produceErrors.Add(float64(len(recs)))
			return nil
		}
		l.p.log.Debug("topic not ready", "topic", l.topic, "err", err)
		return recs
	}
	byPart := make(map[int][]*record, nparts)
	for _, r := range recs {
		part := partitionFor(r.key, nparts)
		byPart[part] = append(byPart[part], r)
	}
	var wg sync.WaitGroup
	for part, rs := range byPart {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.p.sendPartition(ctx, l.topic, part, rs)
		}()
	}
	wg.Wait()
	return nil
}

// dropExpired fails records whose MQTT client has stopped waiting.
func (p *producer) dropExpired(recs []*record) []*record {
	now := time.Now()
	kept := recs[:0]
	for _, r := range recs {
		if !r.deadline.IsZero() && now.After(r.deadline) {
			r.complete(fmt.Errorf("%w: no acknowledgement within %s", ErrKafkaUnavailable, p.cfg.AckTimeout))
			p.metrics.produceErrors.Inc()
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// sendPartition writes recs to one partition in order, in chunks bounded by
// max_batch and max_batch_bytes, one request in flight. A retriable error is
// retried (same chunk, same order) until the records' deadline; a permanent
// error fails the chunk and everything after it, so that no later record of
// this partition overtakes a failed one.
func (p *producer) sendPartition(ctx context.Context, topic string, part int, recs []*record) {
	for len(recs) > 0 {
		n, bytes := 0, 0
		for n < len(recs) && n < p.cfg.MaxBatch {
			s := recs[n].size()
			if n > 0 && bytes+s > p.cfg.MaxBatchBytes {
				break
			}
			bytes += s
			n++
		}
		chunk := recs[:n]
		err := p.sendChunk(ctx, topic, part, chunk)
		if err != nil && errors.Is(err, ErrTooLarge) && n > 1 {
			// Kafka's max.message.bytes limits the whole batch: one large
			// record, or many small ones together, fail it. Send one by one
			// so that only records too large on their own are refused.
			for i, r := range chunk {
				if err = p.sendChunk(ctx, topic, part, chunk[i:i+1]); err != nil && errors.Is(err, ErrTooLarge) {
					r.complete(err)
					p.metrics.produceErrors.Inc()
					err = nil
				} else if err != nil {
					recs = recs[i:]
					break
				}
			}
		}
		if err != nil {
			failAll(recs, err)
			p.metrics.produceErrors.Add(float64(len(recs)))
			return
		}
		recs = recs[n:]
	}
}

func (p *producer) sendChunk(ctx context.Context, topic string, part int, chunk []*record) error {
	krecs := make([]kafka.Record, len(chunk))
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		// Fresh readers on every attempt: kafka.Bytes are read to the end by
		// a produce request, and a retry with spent readers would write
		// records with empty keys and values.
		for i, r := range chunk {
			krecs[i] = kafka.Record{Time: r.received, Key: kafka.NewBytes(r.key), Value: kafka.NewBytes(r.value), Headers: r.headers}
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		res, err := p.client.Produce(rctx, &kafka.ProduceRequest{
			Topic:        topic,
			Partition:    part,
			RequiredAcks: p.acks,
			Compression:  p.codec,
			Records:      kafka.NewRecordReader(krecs...),
		})
		cancel()
		if err == nil && res != nil && res.Error != nil {
			err = res.Error
		}
		if err == nil {
			now := time.Now()
			p.metrics.produceLatency.Observe(now.Sub(start).Seconds())
			p.metrics.batchSize.Observe(float64(len(chunk)))
			p.metrics.recordsProduced.Add(float64(len(chunk)))
			for _, r := range chunk {
				p.metrics.publishToAck.Observe(now.Sub(r.received).Seconds())
				r.complete(nil)
			}
			return nil
		}
		if !retriable(err) {
			return classify(err)
		}
		if errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.NotLeaderForPartition) {
			p.topics.forget(topic)
		}
		// Give up only when every waiting client has given up, or on shutdown.
		expired := true
		for _, r := range chunk {
			if r.deadline.IsZero() || time.Now().Add(backoff).Before(r.deadline) {
				expired = false
				break
			}
		}
		if expired || ctx.Err() != nil {
			return fmt.Errorf("%w: %v", ErrKafkaUnavailable, err)
		}
		if attempt == 0 || attempt%50 == 0 {
			p.log.Warn("produce failed, retrying", "topic", topic, "partition", part, "records", len(chunk), "attempt", attempt+1, "err", err)
		}
		if !sleepCtx(ctx, backoff) {
			return fmt.Errorf("%w: %v", ErrKafkaUnavailable, err)
		}
		backoff = min(backoff*2, time.Second)
	}
}

func failAll(recs []*record, err error) {
	for _, r := range recs {
		r.complete(err)
	}
}

// retriable reports whether a produce error may go away by itself.
func retriable(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary()
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	// Connection refused, EOF, context deadline of one attempt and the like.
	return !errors.Is(err, context.Canceled)
}

// classify turns a permanent Kafka error into one of ours.
func classify(err error) error {
	switch {
	case errors.Is(err, kafka.MessageSizeTooLarge), errors.Is(err, kafka.RecordListTooLarge):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.InvalidTopic):
		return fmt.Errorf("%w: %v", ErrTopicRejected, err)
	}
	return fmt.Errorf("%w: %v", ErrKafkaRejected, err)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func compressionCodec(name string) (kafka.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("unknown compression %q (none, gzip, snappy, lz4, zstd)", name)
}
