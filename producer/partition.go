package producer

import "time"

// topicQ is the producer's state for one Kafka topic: its partitions once
// their leaders are known, and the records that arrived before.
type topicQ struct {
	name    string
	parts   []*partQ  // nil until the first metadata answer
	waiting []*Record // records that arrived before parts were known

	metaAsked   bool      // a metadata request for this topic is pending
	metaFailed  bool      // the last metadata attempt failed: the topic is stalled
	metaRetryAt time.Time // next metadata attempt after a failure
	rejected    error     // permanent error (name, cap, authorization), for a while
	rejectedTil time.Time
	lastUsed    time.Time
	grow        *growth // while the topic gains partitions

	// Set while a request is being built: which entry of call.req.Topics
	// holds this topic.
	call    *produceCall
	callIdx int
}

func (t *topicQ) empty() bool {
	if len(t.waiting) > 0 || t.grow != nil {
		return false
	}
	for _, p := range t.parts {
		if len(p.q) > 0 || p.inflight {
			return false
		}
	}
	return true
}

// partQ is one partition's queue. At most one produce request per partition
// is in flight, so its records reach Kafka in queue order; a retry sends the
// same records again before any later one.
type partQ struct {
	t      *topicQ
	id     int32
	leader int32 // broker id, -1 = no leader known

	q        []*Record // queued, oldest first
	since    time.Time // when q last went from empty to non-empty (linger)
	flight   []*Record // in the request in flight
	inflight bool
	sentAt   time.Time // when the request in flight was built
	listed   bool      // in producer.ready

	failures int // consecutive failed attempts; > 0 = stalled
	backoff  time.Duration
	retryAt  time.Time
	// After Kafka refused a batch for what one record may be: the next
	// splitLeft records go at most splitLimit per request, halved at each
	// refusal of a batch of several and doubled at each success, so that
	// only the bad records are refused, in O(log n) round trips instead of
	// one per record.
	splitLeft, splitLimit int

	// While the topic gains partitions (growth): the records it held then,
	// settled up to oldsAt; draining until they all are.
	olds     []*Record
	oldsAt   int
	draining bool
}

// stalled reports whether the partition is known not to make progress now:
// then records beyond its cap do not hold up every other partition. A
// request in flight for longer than hangAfter counts: a hung broker (no
// answer, no error until the ack timeout) must not stop the loop from
// reading the ring for the partitions of the other brokers.
func (p *partQ) stalled(now time.Time, hangAfter time.Duration) bool {
	return p.failures > 0 || p.leader < 0 || p.t.metaFailed || (p.inflight && now.Sub(p.sentAt) > hangAfter)
}

// take removes the first n records of q, keeping its backing array.
func (p *partQ) take(n int) {
	m := copy(p.q, p.q[n:])
	clear(p.q[m:])
	p.q = p.q[:m]
}

// requeue puts the unfinished records of the failed request back in front
// of q, in their order. It returns how many finished ones (failed while in
// flight) it dropped.
func (p *partQ) requeue() (finished int) {
	live := p.flight[:0]
	for _, r := range p.flight {
		if r.finished.Load() {
			finished++
			continue
		}
		live = append(live, r)
	}
	if len(live) > 0 {
		q := make([]*Record, 0, len(live)+len(p.q))
		q = append(q, live...)
		p.q = append(q, p.q...)
	}
	clear(p.flight)
	p.flight = p.flight[:0]
	p.inflight = false
	return finished
}

// brokerQ counts the requests in flight to one broker.
type brokerQ struct {
	id       int32
	inflight int
	building *produceCall
}
