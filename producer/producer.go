package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/ringbuffer"
)

// Record is one record on its way to Kafka. The caller fills it and
// pushes it into the ring; the producer reports its outcome through Done
// exactly once, and sets Partition and Offset before it reports success.
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []kafka.Header
	// Received is when the record was accepted (the bridge: when its
	// broker accepted the publish); it is the record timestamp (CreateTime)
	// and the start of Metrics.PublishToAck.
	Received time.Time
	// Deadline is when the waiting client gives up: the producer fails the
	// record then, whatever shares its request. Zero: no deadline, the
	// record is retried while the producer runs (best effort, QoS 0).
	Deadline time.Time
	// Done reports the outcome exactly once: nil, or an error wrapping one
	// of the Err* values. Nil: nobody waits (QoS 0).
	Done func(error)
	// Partition and Offset say where Kafka appended the record (set before
	// Done reports success).
	Partition int32
	Offset    int64
	// finished is set by whoever reports the outcome first: the request's
	// goroutine on success, the producer's loop on failure or expiry (a
	// record that expired in flight is not reported again when the response
	// arrives).
	finished atomic.Bool
}

func (r *Record) size() int {
	n := len(r.Key) + len(r.Value) + 64
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

// Complete reports err through Done, if set. The producer does it for the
// records it takes; the caller for those that never reach it (refused, or
// evicted from the ring).
func (r *Record) Complete(err error) {
	if r.Done != nil {
		r.Done(err)
	}
}

// finish claims the right to report r's outcome.
func (r *Record) finish() bool { return r.finished.CompareAndSwap(false, true) }

func (r *Record) expired(now time.Time) bool {
	return !r.Deadline.IsZero() && now.After(r.Deadline)
}

// Producer drains the ring into Kafka, keeping the promises of the package
// comment.
//
// Shape: one loop goroutine (Run) owns all state. Records go into a queue
// per partition; a partition has at most one produce request in flight.
// Every partition that is ready joins ONE produce request to its leader
// broker, carrying every ready partition of every topic; a broker has up to
// maxBrokerInflight requests in flight (disjoint partitions), and what
// arrives meanwhile rides in the next one. A request runs on a goroutine of
// its own and reports back to the loop, which never waits for Kafka: one
// slow, failing or leaderless partition holds up only itself.
//
// Memory is bounded while Kafka is away: the loop stops taking records from
// the ring when it holds heldCap records, or when a QoS 0 record finds its
// healthy partition at partCap (it drains within a round trip); the ring
// then fills and the caller feels the backpressure. QoS 1/2 records queue
// beyond partCap: they are bounded by heldCap and their deadline, and a
// partition whose broker hangs (no answer, no error until the ack timeout)
// must not stop the loop before anyone can tell it from a slow one. A
// stalled partition (failing, leaderless, its topic's metadata failing, or
// its request unanswered for hangAfter) at partCap does not stop the loop
// for QoS 0 records either: it drops them (counted).
//
// Every QoS 1/2 record fails at its own deadline, whatever shares its
// request; QoS 0 records retry while the producer runs. State of topics
// idle for idleAfter is dropped: no goroutine or memory stays per topic.
type Producer struct {
	cfg     Config
	log     *slog.Logger
	rt      kafka.RoundTripper
	addr    net.Addr
	topics  *topicManager
	ring    *ringbuffer.Ring[*Record]
	metrics Metrics
	windows *failWindows // per key: the records that fail with an earlier one
	codec   kafka.Compression
	acks    kafka.RequiredAcks

	partCap   int           // records queued per partition
	heldCap   int           // records held in all (queued and in flight)
	reqBytes  int           // bytes in one produce request
	idleAfter time.Duration // state of an idle topic is dropped after this
	hangAfter time.Duration // a request in flight this long stalls its partitions
	tick      time.Duration // expiry, retry and idle sweep interval

	// Owned by Run.
	tqs       map[string]*topicQ
	brokers   map[int32]*brokerQ
	ready     []*partQ
	held      int
	parked    []*Record       // records taken from the ring, waiting for room
	calls     int             // requests in flight
	dead      bool            // hard shutdown: everything fails
	closing   bool            // ring closed: no more records come
	metaCalls int             // metadata lookups running
	metaWant  map[string]bool // topic -> force a metadata refresh
	lastPrune time.Time

	batches chan []*Record
	free    chan []*Record
	results chan *produceCall
	metaRes chan []topicMeta
}

// maxBrokerInflight is how many produce requests one broker has in flight
// (each on its own connection, with disjoint partitions): two let the next
// request be built and sent while Kafka works on the previous one; more
// split the batches without a measured gain.
const maxBrokerInflight = 2

// New builds a producer that sends through client's transport (kafka-go's
// DefaultTransport when it has none) to client.Addr, reading records from
// ring. It creates the topics it does not find (see Config). Nothing runs
// until Run. Nil collectors in m count nothing.
func New(cfg Config, log *slog.Logger, client *kafka.Client, ring *ringbuffer.Ring[*Record], m Metrics) (*Producer, error) {
	codec, err := compressionCodec(cfg.Compression)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m = m.orDiscard()
	acks := kafka.RequireAll
	switch cfg.Acks {
	case "one":
		acks = kafka.RequireOne
	case "none":
		acks = kafka.RequireNone
	}
	rt := client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	tick := min(max(cfg.AckTimeout/20, 5*time.Millisecond), 50*time.Millisecond)
	if cfg.Linger > 0 {
		tick = min(tick, max(cfg.Linger, time.Millisecond))
	}
	return &Producer{cfg: cfg, log: log, rt: rt, addr: client.Addr, topics: newTopicManager(cfg, log, client, m), ring: ring, metrics: m,
		windows: newFailWindows(cfg.AckTimeout + time.Second), codec: codec, acks: acks,
		partCap: 4 * cfg.MaxBatch, heldCap: 16 * cfg.MaxBatch, reqBytes: 4 * cfg.MaxBatchBytes,
		idleAfter: time.Minute, tick: tick, hangAfter: hangAfter(cfg.AckTimeout),
		tqs: make(map[string]*topicQ), brokers: make(map[int32]*brokerQ), metaWant: make(map[string]bool),
		batches: make(chan []*Record), free: make(chan []*Record, 2),
		results: make(chan *produceCall, 16), metaRes: make(chan []topicMeta, metaParallel),
	}, nil
}

// Failed reports that r, a record with a Done the producer never took
// (evicted from the ring, for one), failed at now: the later records of
// its key received before now fail too instead of overtaking it, as for
// a record the producer failed itself. Safe for concurrent use with Run.
func (p *Producer) Failed(r *Record, now time.Time) { p.windows.fail(r, now) }

// hangAfter is how long a produce request may stay unanswered before its
// partitions count as stalled: a tenth of the ack timeout, within
// [20 ms, 250 ms]. A healthy round trip takes a few milliseconds (tens under
// load); until a hung request counts, a QoS 0 record for a full partition
// of the hung broker holds up the loop, and with it every partition, so
// this is short. Taking a merely slow partition for stalled costs little:
// its QoS 0 records beyond its cap are dropped (counted) instead of pushing
// back on the ring.
func hangAfter(ackTimeout time.Duration) time.Duration {
	return min(max(ackTimeout/10, 20*time.Millisecond), 250*time.Millisecond)
}

var errShutdown = fmt.Errorf("%w: shutting down", ErrKafkaUnavailable)

// Run moves records from the ring to Kafka until the ring is closed and
// every record taken from it has its outcome. Cancelling hard (the
// caller's shutdown timeout) fails what is still pending, at once for
// what is queued, when its request returns for what is in flight. Run
// once.
func (p *Producer) Run(hard context.Context) {
	for range cap(p.free) {
		p.free <- make([]*Record, p.cfg.MaxBatch)
	}
	go p.read()
	tick := time.NewTicker(p.tick)
	defer tick.Stop()
	in := p.batches
	hardDone := hard.Done()
	for {
		recv := in
		if len(p.parked) > 0 || p.held >= p.heldCap {
			recv = nil
		}
		select {
		case b, ok := <-recv:
			if !ok {
				in, p.closing = nil, true
				break
			}
			p.accept(b)
		case c := <-p.results:
			p.finish(c)
		case ms := <-p.metaRes:
			p.applyMeta(ms)
		case now := <-tick.C:
			p.sweep(now)
		case <-hardDone:
			hardDone, p.dead = nil, true
			p.failQueued()
		}
		if len(p.parked) > 0 {
			p.placeParked()
		}
		p.askMeta(hard)
		p.dispatch(hard)
		p.metrics.Held.Set(float64(p.held))
		p.metrics.Topics.Set(float64(len(p.tqs)))
		if in == nil && p.held == 0 && len(p.parked) == 0 && p.calls == 0 && p.metaCalls == 0 {
			return
		}
	}
}

// read hands batches from the ring to the loop; two buffers alternate, so
// the ring is read while the loop places the previous batch.
func (p *Producer) read() {
	defer close(p.batches)
	for {
		buf := <-p.free
		n, err := p.ring.PopBatch(context.Background(), buf)
		if n > 0 {
			p.batches <- buf[:n]
		} else {
			p.free <- buf
		}
		if err != nil {
			return // closed and drained
		}
	}
}

func (p *Producer) accept(b []*Record) {
	now := time.Now()
	for i, r := range b {
		if !p.place(r, now) {
			p.parked = append(p.parked, b[i:]...)
			break
		}
	}
	clear(b)
	p.free <- b[:cap(b)]
}

func (p *Producer) placeParked() {
	now := time.Now()
	for i, r := range p.parked {
		if !p.place(r, now) {
			n := copy(p.parked, p.parked[i:])
			clear(p.parked[n:])
			p.parked = p.parked[:n]
			return
		}
	}
	clear(p.parked)
	p.parked = p.parked[:0]
}

// place queues r on its partition. It returns false when r must wait: the
// producer holds heldCap records, a QoS 0 record's healthy partition is
// full, or r's topic, still being looked up, has a full queue.
func (p *Producer) place(r *Record, now time.Time) bool {
	if p.dead {
		p.fail(r, errShutdown, now, false)
		return true
	}
	if p.windows.blocked(r) {
		p.fail(r, errBehindFailure(r), now, false)
		return true
	}
	if p.held >= p.heldCap {
		return false // checked per record: a batch from the ring may hold up to max_batch
	}
	tq := p.tqs[r.Topic]
	if tq == nil {
		tq = &topicQ{name: r.Topic}
		p.tqs[r.Topic] = tq
	}
	tq.lastUsed = now
	if tq.parts == nil {
		if tq.rejected != nil && now.Before(tq.rejectedTil) {
			p.fail(r, tq.rejected, now, false)
			return true
		}
		if len(tq.waiting) >= p.partCap && !tq.metaFailed {
			return false
		}
		if len(tq.waiting) >= p.partCap && r.Done == nil {
			p.metrics.Dropped.Inc()
			return true
		}
		tq.waiting = append(tq.waiting, r)
		p.held++
		if !tq.metaAsked {
			p.wantMeta(tq, false)
		}
		return true
	}
	if tq.grow != nil && p.hold(tq, r, now) {
		return true
	}
	pq := tq.parts[partitionFor(r.Key, len(tq.parts))]
	if len(pq.q) >= p.partCap {
		switch {
		case r.Done != nil:
			// QoS 1/2: queued beyond the cap, bounded by heldCap and its deadline.
		case r.Done != nil || !pq.stalled(now, p.hangAfter):
			return false
		default:
			p.metrics.Dropped.Inc()
			return true
		}
	}
	p.push(pq, r, now)
	return true
}

func (p *Producer) push(pq *partQ, r *Record, now time.Time) {
	if len(pq.q) == 0 {
		pq.since = now
	}
	pq.q = append(pq.q, r)
	p.held++
	p.list(pq)
}

func (p *Producer) list(pq *partQ) {
	if !pq.listed && !pq.inflight && len(pq.q) > 0 {
		pq.listed = true
		p.ready = append(p.ready, pq)
	}
}

// fail reports err for a record the producer holds no more (not counted in
// held by the caller any longer). poison: later records of its key that
// are still on their way must not overtake it.
func (p *Producer) fail(r *Record, err error, now time.Time, poison bool) {
	if !r.finish() {
		return // acknowledged meanwhile
	}
	r.Complete(err)
	p.metrics.ProduceErrors.Inc()
	if poison {
		p.windows.fail(r, now)
	}
}

// drop fails a queued record that expired or must keep its key's order; it
// reports whether it did.
func (p *Producer) drop(r *Record, now time.Time) bool {
	switch {
	case r.expired(now):
		p.fail(r, fmt.Errorf("%w: no acknowledgement within %s", ErrKafkaUnavailable, p.cfg.AckTimeout), now, true)
	case p.windows.blocked(r):
		p.fail(r, errBehindFailure(r), now, false)
	default:
		return false
	}
	p.held--
	return true
}

// sweep fails what expired (queued or in flight), asks again for metadata
// that failed, and forgets idle topics.
func (p *Producer) sweep(now time.Time) {
	for name, tq := range p.tqs {
		tq.waiting = p.dropAll(tq.waiting, now)
		if tq.grow != nil {
			tq.grow.hold = p.dropAll(tq.grow.hold, now)
			p.settleGrowth(tq, now)
		}
		for _, pq := range tq.parts {
			pq.q = p.dropAll(pq.q, now)
			for _, r := range pq.flight {
				if !r.finished.Load() && r.expired(now) {
					// Kafka may still write it: at least once, the client resends.
					p.fail(r, fmt.Errorf("%w: no acknowledgement within %s", ErrKafkaUnavailable, p.cfg.AckTimeout), now, true)
				}
			}
			if pq.leader < 0 && len(pq.q) > 0 && !tq.metaAsked && !now.Before(tq.metaRetryAt) {
				tq.metaRetryAt = now.Add(retryBackoff)
				p.wantMeta(tq, true)
			}
		}
		if len(tq.waiting) > 0 && tq.metaFailed && !tq.metaAsked && !now.Before(tq.metaRetryAt) {
			p.wantMeta(tq, false)
		}
		if tq.empty() && !tq.metaAsked && now.Sub(tq.lastUsed) > p.idleAfter {
			delete(p.tqs, name)
		}
	}
	if now.Sub(p.lastPrune) > time.Second {
		p.lastPrune = now
		p.windows.prune(now)
	}
}

func (p *Producer) dropAll(q []*Record, now time.Time) []*Record {
	kept := q[:0]
	for _, r := range q {
		if !p.drop(r, now) {
			kept = append(kept, r)
		}
	}
	clear(q[len(kept):])
	return kept
}

// failQueued fails everything not in flight (hard shutdown).
func (p *Producer) failQueued() {
	now := time.Now()
	for _, r := range p.parked {
		p.fail(r, errShutdown, now, false)
	}
	p.parked = nil
	for _, tq := range p.tqs {
		for _, r := range tq.waiting {
			p.fail(r, errShutdown, now, false)
			p.held--
		}
		tq.waiting = nil
		if tq.grow != nil {
			for _, r := range tq.grow.hold {
				p.fail(r, errShutdown, now, false)
				p.held--
			}
			tq.grow.hold = nil
		}
		for _, pq := range tq.parts {
			for _, r := range pq.q {
				p.fail(r, errShutdown, now, false)
				p.held--
			}
			pq.q, pq.listed = nil, false
		}
	}
	p.ready = nil
}

const retryBackoff = 100 * time.Millisecond

func (p *Producer) wantMeta(tq *topicQ, force bool) {
	tq.metaAsked = true
	p.metaWant[tq.name] = p.metaWant[tq.name] || force
}

// Metadata lookups: up to metaParallel at once, each for up to metaTopics
// topics (creating a thousand new topics in one request outlasts the ack
// timeout).
const (
	metaParallel = 4
	metaTopics   = 100
)

// askMeta starts metadata lookups for the topics that want one.
func (p *Producer) askMeta(ctx context.Context) {
	for p.metaCalls < metaParallel && len(p.metaWant) > 0 && !p.dead {
		topics := make([]string, 0, min(len(p.metaWant), metaTopics))
		force := false
		for t, f := range p.metaWant {
			if len(topics) == metaTopics {
				break
			}
			topics = append(topics, t)
			force = force || f
			delete(p.metaWant, t)
		}
		p.metaCalls++
		go func() {
			mctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
			defer cancel()
			p.metaRes <- p.topics.resolve(mctx, topics, force)
		}()
	}
}

func (p *Producer) applyMeta(ms []topicMeta) {
	p.metaCalls--
	now := time.Now()
	for _, m := range ms {
		tq := p.tqs[m.topic]
		if tq == nil {
			continue
		}
		tq.metaAsked = false
		if m.err != nil {
			if errors.Is(m.err, ErrTopicRejected) {
				p.log.Warn("topic rejected", "topic", m.topic, "err", m.err)
				tq.rejected, tq.rejectedTil = m.err, now.Add(time.Second)
				for _, r := range tq.waiting {
					p.fail(r, m.err, now, false)
					p.held--
				}
				tq.waiting = nil
				continue
			}
			p.log.Debug("topic not ready", "topic", m.topic, "err", m.err)
			tq.metaFailed, tq.metaRetryAt = true, now.Add(retryBackoff)
			continue
		}
		tq.metaFailed, tq.rejected = false, nil
		p.setLeaders(tq, m.leaders, now)
	}
}

func (p *Producer) setLeaders(tq *topicQ, leaders []int32, now time.Time) {
	if n := len(tq.parts); n > 0 && len(leaders) > n {
		p.grow(tq, n, now)
	}
	for i := len(tq.parts); i < len(leaders); i++ {
		tq.parts = append(tq.parts, &partQ{t: tq, id: int32(i), leader: -1})
	}
	for i, pq := range tq.parts {
		if i >= len(leaders) {
			break
		}
		if pq.leader != leaders[i] {
			pq.retryAt = now // a new leader: retry at once, not after the backoff
		}
		pq.leader = leaders[i]
	}
	for _, r := range tq.waiting {
		p.held--
		p.push(tq.parts[partitionFor(r.Key, len(tq.parts))], r, now)
	}
	clear(tq.waiting)
	tq.waiting = tq.waiting[:0]
}

func (p *Producer) broker(id int32) *brokerQ {
	b := p.brokers[id]
	if b == nil {
		b = &brokerQ{id: id}
		p.brokers[id] = b
	}
	return b
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
	// Connection refused, EOF, context deadline of one attempt, a stale
	// leader in the transport's cache and the like.
	return !errors.Is(err, context.Canceled)
}

// routingError reports whether err says the leader we sent to is not (or
// no longer) the partition's leader: metadata must be refreshed at once.
func routingError(err error) bool {
	return errors.Is(err, kafka.NotLeaderForPartition) || errors.Is(err, kafka.UnknownTopicOrPartition) ||
		errors.Is(err, kafka.LeaderNotAvailable) || errors.Is(err, kafka.BrokerNotAvailable) ||
		errors.Is(err, kafka.ReplicaNotAvailable) || errors.Is(err, kafka.NotController)
}

// classify turns a permanent Kafka error into one of ours.
func classify(err error) error {
	switch {
	case tooLarge(err):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.InvalidTopic):
		return fmt.Errorf("%w: %v", ErrTopicRejected, err)
	}
	return fmt.Errorf("%w: %v", ErrKafkaRejected, err)
}

// recordRejected reports whether Kafka refused a batch for what a record
// in it may be: too large, invalid (INVALID_RECORD, e.g. no key on a
// compacted topic), a bad timestamp, or corrupt. A batch so refused is
// split and its records are sent one by one; a record refused on its own
// fails at once, whatever kafka-go's Temporary says (it calls
// CORRUPT_MESSAGE temporary, but Kafka answers it for records it will
// never take, and TCP and the batch CRC leave corruption on the way
// improbable): retried, a QoS 0 one would be for the producer's life.
func recordRejected(err error) bool {
	return tooLarge(err) || errors.Is(err, kafka.InvalidRecord) || errors.Is(err, kafka.InvalidMessage) ||
		errors.Is(err, kafka.InvalidTimestamp) || errors.Is(err, kafka.InvalidMessageSize)
}

func tooLarge(err error) bool {
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
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
