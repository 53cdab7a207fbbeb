package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
)

// produceCall is one produce request to one broker: a chunk of every ready
// partition led by that broker, across topics.
type produceCall struct {
	b       *brokerQ
	parts   []*partQ
	req     produceAPI.Request
	bytes   int
	records int
	krecs   []kafka.Record // scratch for building record sets

	start time.Time
	res   *produceAPI.Response
	err   error
}

// dispatch sends one request to each broker that has ready partitions and
// no request in flight.
func (p *producer) dispatch(ctx context.Context) {
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
			c = &produceCall{b: b, req: produceAPI.Request{Acks: int16(p.acks), Timeout: int32(p.cfg.AckTimeout / time.Millisecond)}}
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
		c.krecs = nil
		go p.send(ctx, c)
	}
}

func (p *producer) lingered(pq *partQ, now time.Time) bool {
	return p.cfg.Linger <= 0 || p.closing || len(pq.q) >= p.cfg.MaxBatch || now.Sub(pq.since) >= p.cfg.Linger
}

// add moves a chunk of pq's queue (bounded by max_batch, max_batch_bytes
// and what the request still takes) into c. It reports whether pq is now in
// flight. Records that expired or must keep their key's order are failed on
// the way.
func (p *producer) add(c *produceCall, pq *partQ, now time.Time) bool {
	limit := p.cfg.MaxBatch
	if pq.single > 0 {
		limit = 1
	}
	start := len(c.krecs)
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
		// Fresh readers for every attempt: a produce request reads them to
		// the end, and a retry with spent readers would write empty records.
		c.krecs = append(c.krecs, kafka.Record{Time: r.received, Key: kafka.NewBytes(r.key), Value: kafka.NewBytes(r.value), Headers: r.headers})
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
		c.req.Topics = append(c.req.Topics, produceAPI.RequestTopic{Topic: tq.name})
	}
	rt := &c.req.Topics[tq.callIdx]
	rt.Partitions = append(rt.Partitions, produceAPI.RequestPartition{
		Partition: pq.id,
		RecordSet: protocol.RecordSet{
			Attributes: protocol.Attributes(p.codec) & 0x7,
			Records:    protocol.NewRecordReader(c.krecs[start:]...),
		},
	})
	c.parts = append(c.parts, pq)
	c.bytes += bytes
	c.records += n
	pq.inflight = true
	return true
}

// send runs one request; the loop handles the outcome.
func (p *producer) send(ctx context.Context, c *produceCall) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	c.start = time.Now()
	res, err := p.rt.RoundTrip(rctx, p.addr, &c.req)
	cancel()
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
	p.results <- c
}

var errNoPartitionAnswer = errors.New("partition missing from the produce response")

// finish applies the outcome of a request to each of its partitions.
func (p *producer) finish(c *produceCall) {
	p.calls--
	c.b.inflight--
	now := time.Now()
	if c.err != nil {
		// The whole request failed (connection, timeout, stale routing in
		// the transport's cache): every partition retries.
		for _, pq := range c.parts {
			p.outcome(pq, c.err, now)
		}
		return
	}
	p.metrics.produceLatency.Observe(now.Sub(c.start).Seconds())
	p.metrics.batchSize.Observe(float64(c.records))
	answered := 0
	if c.res != nil {
		for i := range c.res.Topics {
			rt := &c.res.Topics[i]
			tq := p.tqs[rt.Topic]
			if tq == nil {
				continue
			}
			for j := range rt.Partitions {
				rp := &rt.Partitions[j]
				if rp.Partition < 0 || int(rp.Partition) >= len(tq.parts) {
					continue
				}
				pq := tq.parts[rp.Partition]
				if !pq.inflight {
					continue
				}
				var err error
				if rp.ErrorCode != 0 {
					err = kafka.Error(rp.ErrorCode)
					if rp.ErrorMessage != "" {
						err = fmt.Errorf("%w: %s", err, rp.ErrorMessage)
					}
				}
				p.outcome(pq, err, now)
				answered++
			}
		}
	} else {
		for _, pq := range c.parts {
			p.outcome(pq, nil, now)
		}
		return
	}
	if answered < len(c.parts) {
		for _, pq := range c.parts {
			if pq.inflight {
				p.outcome(pq, errNoPartitionAnswer, now)
			}
		}
	}
}

// outcome settles the records pq had in flight.
func (p *producer) outcome(pq *partQ, err error, now time.Time) {
	switch {
	case err == nil:
		for _, r := range pq.flight {
			if !r.finished {
				r.finished = true
				p.metrics.publishToAck.Observe(now.Sub(r.received).Seconds())
				r.complete(nil)
			}
		}
		p.metrics.recordsProduced.Add(float64(len(pq.flight)))
		p.held -= len(pq.flight)
		if pq.single > 0 {
			pq.single -= len(pq.flight)
		}
		clear(pq.flight)
		pq.flight = pq.flight[:0]
		pq.inflight = false
		pq.failures, pq.backoff = 0, 0
	case tooLarge(err) && len(pq.flight) > 1:
		// Kafka's max.message.bytes limits the whole batch: send these
		// records one by one, so that only those too large on their own
		// are refused.
		pq.single = len(pq.flight)
		p.held -= pq.requeue()
	case tooLarge(err):
		r := pq.flight[0]
		if !r.finished {
			p.fail(r, classify(err), now, false) // can never be written: blocks nobody
		}
		p.held -= len(pq.flight)
		if pq.single > 0 {
			pq.single--
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
			if !r.finished {
				p.fail(r, err, now, true)
			}
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
