package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// produceCall is one produce request to one broker: a chunk of every ready
// partition led by that broker, across topics.
type produceCall struct {
	b       *brokerQ
	parts   []*partQ
	req     rawproduce.Request // record sets encoded by send (encodeBatch)
	slots   []callSlot         // where each partition sits in req
	bytes   int
	records int

	start time.Time
	res   *produceAPI.Response
	err   error
}

// callSlot places one partition in a request; err is its outcome.
type callSlot struct {
	pq     *partQ
	ti, pi int // index in req.Topics and in its Partitions
	err    error
	base   int64 // the offset Kafka gave the first record
}

// dispatch sends one request to each broker that has ready partitions and
// fewer than maxBrokerInflight requests in flight; it carries every ready
// partition that broker leads.
func (p *Producer) dispatch(ctx context.Context) {
	if len(p.ready) == 0 || p.dead {
		return
	}
	now := time.Now()
	var calls []*produceCall
	n := len(p.ready)
	kept := p.ready[:0]
	for _, pq := range p.ready {
		if len(pq.q) == 0 || pq.inflight {
			pq.listed = false
			continue
		}
		if pq.leader < 0 || now.Before(pq.retryAt) || !p.lingered(pq, now) {
			kept = append(kept, pq)
			continue
		}
		b := p.broker(pq.leader)
		c := b.building
		if c == nil {
			if b.inflight >= maxBrokerInflight {
				kept = append(kept, pq)
				continue
			}
			c = &produceCall{b: b, req: rawproduce.Request{Acks: int16(p.acks), Timeout: int32(p.cfg.AckTimeout / time.Millisecond)}}
			b.building = c
			calls = append(calls, c)
		}
		if !p.add(c, pq, now) {
			if len(pq.q) > 0 {
				kept = append(kept, pq)
			} else {
				pq.listed = false
			}
			continue
		}
		pq.listed = false
	}
	clear(p.ready[len(kept):n])
	p.ready = kept
	for _, c := range calls {
		c.b.building = nil
		for i := range c.req.Topics {
			p.tqs[c.req.Topics[i].Topic].call = nil
		}
		if len(c.parts) == 0 {
			continue
		}
		c.b.inflight++
		p.calls++
		go p.send(ctx, c)
	}
}

func (p *Producer) lingered(pq *partQ, now time.Time) bool {
	return p.cfg.Linger <= 0 || p.closing || len(pq.q) >= p.cfg.MaxBatch || now.Sub(pq.since) >= p.cfg.Linger
}

// add moves a chunk of pq's queue (bounded by max_batch, max_batch_bytes
// and what the request still takes) into c. It reports whether pq is now in
// flight. Records that expired or must keep their key's order are failed on
// the way.
func (p *Producer) add(c *produceCall, pq *partQ, now time.Time) bool {
	limit := p.cfg.MaxBatch
	if pq.splitLeft > 0 {
		limit = pq.splitLimit
	}
	i, n, bytes := 0, 0, 0
	for i < len(pq.q) && n < limit {
		r := pq.q[i]
		if p.drop(r, now) {
			pq.q[i] = nil
			i++
			continue
		}
		s := r.size()
		if n > 0 && bytes+s > p.cfg.MaxBatchBytes {
			break
		}
		if c.bytes > 0 && c.bytes+bytes+s > p.reqBytes {
			break // the request is full: next one
		}
		pq.flight = append(pq.flight, r)
		bytes += s
		n++
		i++
	}
	if i > 0 {
		pq.take(i)
	}
	if n == 0 {
		return false
	}
	tq := pq.t
	if tq.call != c {
		tq.call, tq.callIdx = c, len(c.req.Topics)
		c.req.Topics = append(c.req.Topics, rawproduce.RequestTopic{Topic: tq.name})
	}
	rt := &c.req.Topics[tq.callIdx]
	c.slots = append(c.slots, callSlot{pq: pq, ti: tq.callIdx, pi: len(rt.Partitions)})
	rt.Partitions = append(rt.Partitions, rawproduce.RequestPartition{Partition: pq.id})
	c.parts = append(c.parts, pq)
	c.bytes += bytes
	c.records += n
	pq.inflight, pq.sentAt = true, now
	return true
}

// send runs one request on its own goroutine: it encodes the records,
// waits for Kafka and acknowledges the records of the partitions that
// succeeded (their clients need not wait for the loop); the loop settles
// the rest. The partitions' flight records are not changed while in flight.
func (p *Producer) send(ctx context.Context, c *produceCall) {
	buf := requestPool.Get().(*[]byte)
	b := (*buf)[:0]
	now := time.Now()
	for _, sl := range c.slots {
		from := len(b)
		var err error
		if b, err = encodeBatch(b, sl.pq.flight, p.codec, now); err != nil {
			c.err = err
			p.results <- c
			return
		}
		// A fresh reader for every attempt (a request reads it to the end).
		// Its bytes stay valid when a later append moves b: append never
		// writes over what an array already holds.
		c.req.Topics[sl.ti].Partitions[sl.pi].RecordSet = protocol.RawRecordSet{Reader: bytes.NewReader(b[from:])}
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	c.start = time.Now()
	res, err := p.rt.RoundTrip(rctx, p.addr, &c.req)
	cancel()
	if err == nil && cap(b) <= 8<<20 {
		// Only after an answer: a request given up on may still be being
		// written from b.
		*buf = b
		requestPool.Put(buf)
	}
	switch {
	case err != nil:
		c.err = err
	case res == nil && p.acks == kafka.RequireNone:
	default:
		var ok bool
		if c.res, ok = res.(*produceAPI.Response); !ok {
			c.err = fmt.Errorf("produce: unexpected response %T", res)
		}
	}
	if c.err == nil {
		p.settle(c)
	}
	p.results <- c
}

// requestPool holds the buffers of produce requests' record sets.
var requestPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// settle gives each slot its outcome from the response and acknowledges
// the records of those that succeeded.
func (p *Producer) settle(c *produceCall) {
	now := time.Now()
	for i := range c.slots {
		c.slots[i].err = errNoPartitionAnswer
	}
	if c.res == nil { // acks=none: no response
		for i := range c.slots {
			c.slots[i].err = nil
		}
	} else {
		f := newSlotFinder(c)
		for i := range c.res.Topics {
			rt := &c.res.Topics[i]
			for j := range rt.Partitions {
				rp := &rt.Partitions[j]
				sl := f.find(rt.Topic, rp.Partition, i, j)
				if sl == nil {
					continue
				}
				sl.err, sl.base = nil, rp.BaseOffset
				if rp.ErrorCode != 0 {
					sl.err = kafka.Error(rp.ErrorCode)
					if rp.ErrorMessage != "" {
						sl.err = fmt.Errorf("%w: %s", sl.err, rp.ErrorMessage)
					}
				}
			}
		}
	}
	p.metrics.ProduceLatency.Observe(now.Sub(c.start).Seconds())
	p.metrics.BatchSize.Observe(float64(c.records))
	for _, sl := range c.slots {
		if sl.err != nil {
			continue
		}
		for k, r := range sl.pq.flight {
			if r.finish() {
				r.Partition, r.Offset = sl.pq.id, sl.base+int64(k)
				p.metrics.PublishToAck.Observe(now.Sub(r.Received).Seconds())
				r.Complete(nil)
			}
		}
		p.metrics.RecordsProduced.Add(float64(len(sl.pq.flight)))
	}
}

// slotFinder finds the slot of a response partition: at the same place as
// in the request, else by name (Kafka does not keep the request's topic
// order: a linear search per partition cost 8% of the CPU with 1,000
// topics).
type slotFinder struct {
	c      *produceCall
	idx    [][]int // [topic index][partition index] -> slot
	byName map[slotKey]int
}

type slotKey struct {
	topic string
	part  int32
}

func newSlotFinder(c *produceCall) *slotFinder {
	f := &slotFinder{c: c, idx: make([][]int, len(c.req.Topics))}
	for i := range c.req.Topics {
		f.idx[i] = make([]int, len(c.req.Topics[i].Partitions))
	}
	for k, sl := range c.slots {
		f.idx[sl.ti][sl.pi] = k
	}
	return f
}

func (f *slotFinder) find(topic string, part int32, ti, pi int) *callSlot {
	c := f.c
	if ti < len(f.idx) && pi < len(f.idx[ti]) {
		if sl := &c.slots[f.idx[ti][pi]]; sl.pq.t.name == topic && sl.pq.id == part {
			return sl
		}
	}
	if f.byName == nil {
		f.byName = make(map[slotKey]int, len(c.slots))
		for k := range c.slots {
			f.byName[slotKey{c.slots[k].pq.t.name, c.slots[k].pq.id}] = k
		}
	}
	if k, ok := f.byName[slotKey{topic, part}]; ok {
		return &c.slots[k]
	}
	return nil
}

var errNoPartitionAnswer = errors.New("partition missing from the produce response")

// finish applies the outcome of a request to each of its partitions.
func (p *Producer) finish(c *produceCall) {
	p.calls--
	c.b.inflight--
	now := time.Now()
	for _, sl := range c.slots {
		err := c.err // the whole request failed: every partition retries
		if err == nil {
			err = sl.err
		}
		p.outcome(sl.pq, err, now)
	}
	for _, sl := range c.slots {
		if sl.pq.t.grow != nil {
			p.settleGrowth(sl.pq.t, now)
		}
	}
}

// outcome settles the records pq had in flight.
func (p *Producer) outcome(pq *partQ, err error, now time.Time) {
	switch {
	case err == nil: // acknowledged by settle
		p.held -= len(pq.flight)
		if pq.splitLeft > 0 {
			pq.splitLeft -= len(pq.flight)
			pq.splitLimit = min(2*pq.splitLimit, p.cfg.MaxBatch) // past the bad part: grow back
		}
		clear(pq.flight)
		pq.flight = pq.flight[:0]
		pq.inflight = false
		pq.failures, pq.backoff = 0, 0
	case recordRejected(err) && len(pq.flight) > 1:
		// Kafka refused the batch for what one record may be (too large
		// for max.message.bytes, invalid, corrupt): send these records in
		// halves, and halves of a refused half, so that only the bad ones
		// are refused.
		pq.splitLeft = max(pq.splitLeft, len(pq.flight))
		pq.splitLimit = len(pq.flight) / 2
		p.held -= pq.requeue()
	case recordRejected(err):
		p.fail(pq.flight[0], classify(err), now, false) // can never be written: blocks nobody
		p.held -= len(pq.flight)
		if pq.splitLeft > 0 {
			pq.splitLeft--
		}
		clear(pq.flight)
		pq.flight = pq.flight[:0]
		pq.inflight = false
	case !retriable(err) || p.dead:
		if p.dead {
			err = fmt.Errorf("%w: %v", errShutdown, err)
		} else {
			err = classify(err)
		}
		for _, r := range pq.flight {
			p.fail(r, err, now, true)
		}
		p.held -= len(pq.flight)
		clear(pq.flight)
		pq.flight = pq.flight[:0]
		pq.inflight = false
	default:
		p.held -= pq.requeue()
		pq.failures++
		pq.backoff = min(max(2*pq.backoff, 20*time.Millisecond), time.Second)
		pq.retryAt = now.Add(pq.backoff)
		if routingError(err) || errors.Is(err, errNoPartitionAnswer) || !isKafkaError(err) {
			// A leader error, or a transport-level one (the leader's
			// connection broke, a stale route in kafka-go's cache): fetch
			// fresh metadata from Kafka now; kafka-go would keep its cache
			// for its TTL.
			p.wantMeta(pq.t, true)
		}
		if pq.failures == 1 || pq.failures%50 == 0 {
			p.log.Warn("produce failed, retrying", "topic", pq.t.name, "partition", pq.id, "records", len(pq.q), "attempt", pq.failures, "err", err)
		}
	}
	if p.dead {
		for _, r := range pq.q {
			p.fail(r, errShutdown, now, false)
			p.held--
		}
		clear(pq.q)
		pq.q = pq.q[:0]
	}
	p.list(pq)
}

func isKafkaError(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr)
}
