package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/stack"
	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// replayer delivers a resumed session's queue from Kafka: every message
// that matched its subscriptions since its positions (positions.go), then
// hands the session over to live delivery.
//
// A replay reads the partitions the session's subscriptions can draw from
// (topics whose name maps back to a matching MQTT topic by the default
// rule, the reverse topics, and every partition the session has a position
// in) from the position, or from the subscription's time where it has
// none, up to the end offsets listed when it starts. Then the
// subscriptions go live in the broker, and a second, usually empty, pass
// reads what Kafka appended between the listing and that moment. A live
// delivery that repeats a record the replay handled (the reverse path
// behind the replay's end) is not written (replay_copies.go).
// Deliveries are written straight to the client, at most its Receive
// Maximum (64 for MQTT 3.1.1) unacknowledged at once, QoS 1/2 only (MQTT
// queues no QoS 0 message for an offline session).
//
// At most MaxReplays run at once per instance; every replay lists offsets
// and fetches through the instance's shared reads (reads.go: what replays
// ask at the same time is asked of Kafka once, and the records of a
// partition fetched once for all the replays that read it) and one
// listing of the cluster's topics (replay_topics.go). A running replay
// holds a slot of replayer.slots. One whose client's window stays full
// (its client does not acknowledge: a stuck device) gives the slot up to a
// replay that waits for one once it has waited replaySlotPatience: it
// drops what it fetched and did not write, waits for its window without a
// slot, takes one again and reads on from the first record it did not
// hand out (yield). Forty clients that never acknowledged took all 32
// slots for good, and every later resume on the instance waited.
type replayer struct {
	h         *sessionHook
	log       *slog.Logger
	tm        *topicmap.Map
	reads     *reads                       // offset listings and fetches, shared by the replays
	topics    *topicLister                 // the cluster's topics, shared by the replays
	isReverse func(kafkaTopic string) bool // among reverse.topics
	slots     chan struct{}
	waiting   atomic.Int32 // replays waiting to take a slot (acquire)
	metrics   *stateMetrics
	stop      <-chan struct{}
	closes    closeWatch // cancels the replays of clients that went
	// maxQueued (state.max_queued) caps the new messages of the first
	// pass; queueDrops counts those beyond it.
	maxQueued  int
	queueDrops prometheus.Counter
}

// MaxReplays bounds the replays running at once on one instance. A replay
// mostly waits (the shared reads' rounds, its client's acknowledgements),
// so a storm of resumes is served faster by more of them; each holds no
// Kafka client of its own, only the records of its partitions' last fetch
// answer (at most readsFetchBytes a partition, shared with the replays
// that read the same partition).
const MaxReplays = 4096

// replaySlotPatience is how long a replay keeps its slot while its
// client's window is full and another replay waits for a slot. A client
// that acknowledges answers within a round trip: its replay keeps its
// slot (and its Kafka client) through the waits.
const replaySlotPatience = time.Second

// replayYieldPoll bounds how often a replay without a slot looks at its
// client's window (it starts at a millisecond and doubles up to this): a
// thousand stuck clients cost ten thousand cheap looks a second.
const replayYieldPoll = 100 * time.Millisecond

// errYieldSlot: the replay gives its slot up (waitWindow). Nothing of the
// record it was delivering was done; it is read again once the replay has
// a slot again.
var errYieldSlot = errors.New("replay: yielding its slot while the client's window is full")

// replayWindowV3 is how many replayed messages an MQTT 3.1.1 client (no
// Receive Maximum) may have unacknowledged at once.
const replayWindowV3 = 64

// run replays o's queue and then makes its subscriptions live.
// The caller has counted it in inj.replaying, before the client's first
// packet is read.
func (r *replayer) run(o *ownedSession, connected time.Time) {
	stack.Grow() // its deliveries go deep
	defer r.h.inj.replaying.Add(-1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.closes.watch(o.cl, cancel)()
	if r.acquire(ctx) != nil {
		return
	}
	rs := &replayRun{r: r, o: o, cl: o.cl, subs: o.resumedSubs(), connected: connected, slotted: true}
	defer func() {
		if rs.slotted {
			r.release()
		}
	}()
	slotted := time.Now()
	err := rs.catchUp(ctx)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		var first time.Duration // to the first delivery; 0: none
		if rs.first {
			first = rs.firstAt.Sub(slotted)
		}
		r.log.Debug("session replay", "client", o.cl.ID, "delivered", rs.delivered, "fetched", rs.fetched,
			"fetching", rs.fetching, "listing", rs.listing, "listing_topics", rs.listingTopics, "listing_ends", rs.listingEnds, "first", first, "windowed", rs.windowed,
			"yields", rs.yields, "reslotting", rs.reslotting,
			"waited", slotted.Sub(connected), "took", time.Since(connected), "err", err)
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("session replay failed: the client is disconnected and resumes from its last position when it reconnects",
			"client", o.cl.ID, "err", err)
		o.cl.Stop(fmt.Errorf("%w: session replay: %v", ErrKafkaUnavailable, err))
		return
	}
	if ctx.Err() != nil {
		return
	}
	r.metrics.replayDuration.Observe(time.Since(connected).Seconds())
}

// acquire takes a slot, counted among the replays waiting for one
// meanwhile (a slot holder whose client does not acknowledge yields to
// them: waitWindow).
func (r *replayer) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}:
		return nil
	default:
	}
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives a slot back.
func (r *replayer) release() { <-r.slots }

// replayRun is one session's replay.
type replayRun struct {
	r          *replayer
	o          *ownedSession
	cl         *mqtt.Client
	subs       []state.Subscription
	connected  time.Time
	first      bool
	firstAt    time.Time
	delivered  int
	horizon    int64         // the session's horizon when it resumed (positions.go)
	lastListed time.Time     // when the last pass listed its end offsets
	fetched    int           // records fetched
	fetching   time.Duration // waiting for fetches
	listing    time.Duration // waiting for topic and offset listings
	// ... of which for the topics, and for the end offsets
	listingTopics, listingEnds time.Duration
	windowed                   time.Duration // waiting for the client's window
	slotted                    bool          // holds a slot of replayer.slots
	yields                     int           // times it gave its slot up (yield)
	reslotting                 time.Duration // waiting to take a slot again after a yield
	backlog                    bool          // the first pass: what matched while the client was away
	queued                     int           // new (not resent) messages of the backlog delivered
	later                      *deferrals    // the last pass: records kept behind live deliveries
	liveAt                     time.Time     // when the subscriptions went live (zero: first pass)
	// positioned are the partitions read from the session's position (not
	// from a time): on a reverse topic, every record there that matches is
	// the session's, however old (deliver).
	positioned map[tp]bool
	corked     corker // the client's connection while corked (cork)
	hdrs       []topicmap.Header
}

func (rs *replayRun) catchUp(ctx context.Context) error {
	filters := make([]string, len(rs.subs))
	for i, s := range rs.subs {
		filters[i] = s.Filter
	}
	rs.o.pos.startReplay(filters)
	if err := rs.resendReleases(); err != nil {
		return err
	}
	rs.horizon = rs.o.pos.resumeHorizon()
	rs.backlog = true
	ends, err := rs.pass(ctx, nil)
	rs.backlog = false
	if err != nil {
		return err
	}
	rs.o.pos.endResend()
	// Live deliveries wait until the last pass has written its older
	// messages (replay_hold.go).
	release := rs.o.live.start(&rs.r.h.holding, &rs.r.h.tracking)
	defer rs.o.live.end(&rs.r.h.tracking)
	defer release()
	rs.goLive()
	rs.liveAt = time.Now()
	// What Kafka appended between the listing and the subscriptions going
	// live: read it too (a message delivered live meanwhile comes twice),
	// behind the live deliveries it meets (replay_defer.go).
	rs.later = newDeferrals()
	ends, err = rs.pass(ctx, ends)
	release()
	if err != nil {
		return err
	}
	if err := rs.drain(ctx, ends); err != nil {
		return err
	}
	covered := int64(0)
	if !rs.lastListed.IsZero() {
		covered = rs.lastListed.Add(-HorizonSlack).UnixMilli()
	}
	rs.o.pos.caughtUp(covered)
	return nil
}

// resendReleases resends the PUBREL of each pending QoS 2 delivery whose
// PUBREC had come, under its packet id, and keeps it in flight until the
// client's PUBCOMP: "the Server MUST resend any unacknowledged ... PUBREL
// packets using their original Packet Identifiers" and must not resend
// the PUBLISH once it sent the PUBREL [MQTT-4.4.0-1] [MQTT-4.3.3-4]. It
// needs no Kafka record: the client has the message.
func (rs *replayRun) resendReleases() error {
	for _, pid := range rs.o.pos.takeReleased() {
		rel := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: pid,
			Created: time.Now().Unix()}
		if rs.cl.State.Inflight.Set(rel) {
			atomic.AddInt64(&rs.r.h.server.Info.Inflight, 1)
			rs.cl.State.Inflight.DecreaseSendQuota()
		}
		if err := rs.cl.WritePacket(rel); err != nil {
			return fmt.Errorf("replay to %s: %w", rs.cl.ID, err)
		}
	}
	return nil
}

// goLive ends the first pass: live QoS 1/2 deliveries are no longer
// discarded as the replay's (ownedSession.early); they wait behind the
// last pass (replay_hold.go). The resumed subscriptions are in the
// broker's index since the CONNACK; this puts them there with the options
// of a SUBSCRIBE of the same filter meanwhile.
func (rs *replayRun) goLive() {
	rs.o.early.Store(false)
	s := rs.r.h.server
	for _, sub := range rs.o.takeResumed() {
		sb := toPacketSub(sub) // subscribed again meanwhile: with its new options
		if s.Topics.Subscribe(rs.cl.ID, sb) {
			atomic.AddInt64(&s.Info.Subscriptions, 1)
		}
		rs.cl.State.Subscriptions.Add(sb.Filter, sb)
	}
}

// pass reads every candidate partition from its start (from: the previous
// pass's ends; nil: the session's positions) to the end offsets it lists,
// delivers what matches, and returns those end offsets.
func (rs *replayRun) pass(ctx context.Context, from map[tp]int64) (map[tp]int64, error) {
	t0 := time.Now()
	listed := func() { rs.listing += time.Since(t0) }
	topics, err := rs.candidates(ctx)
	if err != nil || len(topics) == 0 {
		return nil, err
	}
	listedAt := time.Now()
	rs.listingTopics += listedAt.Sub(t0)
	// The first pass takes a listing on its way (the last pass reads on
	// from its ends); the last pass one listed after its subscriptions
	// went live.
	ends, err := rs.r.reads.endOffsets(ctx, topics, from == nil)
	rs.listingEnds += time.Since(listedAt)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	if from != nil {
		rs.lastListed = listedAt
	}
	// The last pass goes on from the first pass's ends; a partition the
	// first pass did not read (new since, or missed by its shared listing:
	// replay_topics.go) starts as the first pass would have.
	starts := map[tp]int64{}
	known := map[tp]int64{}
	for _, p := range rs.o.pos.snapshot() {
		known[tp{p.Topic, p.Partition}] = p.Offset
	}
	// Partitions without a position start at the subscriptions' time, or,
	// on the reverse topics, at the session's horizon when later
	// (positions.go).
	byTime := map[tp]int64{}
	since := rs.oldestSince()
	for k := range ends {
		if off, ok := from[k]; ok {
			starts[k] = off
		} else if off, ok := known[k]; ok {
			starts[k] = off
			if rs.positioned == nil {
				rs.positioned = map[tp]bool{}
			}
			rs.positioned[k] = true
		} else if rs.horizon > since && rs.r.isReverse(k.topic) {
			byTime[k] = rs.horizon
		} else {
			// deliver skips what is older than a subscription: a lookup
			// from up to a second earlier reads a little more and
			// delivers the same. Sessions that subscribed within one
			// second share one lookup (Kafka finds an offset by time by
			// reading the segment's batches, a compressed one
			// decompressed: with a lookup per session, 10,000 resumes
			// cost it more CPU than everything else of the storm).
			byTime[k] = since - since%timeLookupGrain
		}
	}
	after, err := rs.r.reads.offsetsAfter(ctx, byTime)
	if err != nil {
		return nil, fmt.Errorf("list offsets by time: %w", err)
	}
	for k, off := range after {
		if off < 0 { // nothing since: from the end
			off = ends[k]
		}
		starts[k] = off
		rs.o.pos.startedByTime(k, off)
	}
	listed()
	if rs.r.log.Enabled(ctx, slog.LevelDebug) {
		rs.r.log.Debug("session replay pass", "client", rs.cl.ID, "first", rs.backlog, "from", spans(starts, ends))
	}
	assign := map[string]map[int32]kgo.Offset{}
	for k, e := range ends {
		if s := starts[k]; s < e {
			if assign[k.topic] == nil {
				assign[k.topic] = map[int32]kgo.Offset{}
			}
			assign[k.topic][k.part] = kgo.NewOffset().At(s)
		} else {
			rs.o.pos.replayed(k, e)
		}
	}
	if len(assign) == 0 {
		return ends, nil
	}
	return ends, rs.read(ctx, assign, ends)
}

// read consumes the assigned partitions up to ends. When the replay
// yields its slot (errYieldSlot: its client's window stayed full), its
// Kafka client goes with it, and it reads on from each partition's first
// record not handed out once it has a slot again.
func (rs *replayRun) read(ctx context.Context, assign map[string]map[int32]kgo.Offset, ends map[tp]int64) error {
	next := map[tp]int64{} // partitions not read to their end: the next offset to hand out
	for t, ps := range assign {
		for part, off := range ps {
			k := tp{t, part}
			next[k] = off.EpochOffset().Offset
			rs.o.pos.reading(k, next[k])
		}
	}
	for len(next) > 0 {
		err := rs.readFrom(ctx, next, ends)
		if !errors.Is(err, errYieldSlot) {
			return err
		}
		if err := rs.yield(ctx); err != nil {
			return err
		}
	}
	return nil
}

// readFrom reads the partitions of next from their offsets there, with a
// Kafka client of its own, until each reached its end (then it leaves
// next) or a delivery fails.
func (rs *replayRun) readFrom(ctx context.Context, next map[tp]int64, ends map[tp]int64) error {
	assign := map[string]map[int32]kgo.Offset{}
	for k, off := range next {
		if assign[k.topic] == nil {
			assign[k.topic] = map[int32]kgo.Offset{}
		}
		assign[k.topic][k.part] = kgo.NewOffset().At(off)
	}
	// Control records (a transaction's commit or abort marker) come too: a
	// partition may end with one, and the read is done at its offset.
	for len(next) > 0 {
		t0 := time.Now()
		got, err := rs.r.reads.fetch(ctx, next)
		rs.fetching += time.Since(t0)
		if err != nil {
			return err
		}
		for k, f := range got {
			if f.err != nil {
				return fmt.Errorf("replay fetch: %w", f.err)
			}
			if f.logStart >= 0 { // deleted by retention: nothing to hand out below it
				next[k] = f.logStart
			}
			rs.cork()
			for _, rec := range f.recs {
				if rec.Offset < next[k] || rec.Offset >= ends[k] {
					continue
				}
				if !rec.Attrs.IsControl() {
					rs.fetched++
					rs.r.metrics.replayRead.Inc()
					if err := rs.take(ctx, rec); err != nil {
						rs.uncork()
						return err // not handed out: read again after a yield
					}
				}
				next[k] = rec.Offset + 1
				if !rs.later.waits(k) {
					rs.o.pos.reading(k, next[k])
				}
			}
			rs.uncork()
			// Nothing is taken for read up to the end but records: a high
			// watermark below the listed end (an answer older than the
			// listing) once read as the end skipped the records between.
			if !rs.later.waits(k) {
				rs.o.pos.reading(k, next[k])
			}
			if next[k] >= ends[k] {
				delete(next, k)
				if !rs.later.waits(k) { // else once its kept records are delivered
					rs.o.pos.replayed(k, ends[k])
				}
			}
		}
	}
	return nil
}

// corker is a client connection that can hold its writes and send them
// with one system call (the bridge's connections): a replay writes the
// deliveries of each fetch answer corked, 20 messages with one write
// instead of 20 (a reconnect storm spent a fifth of its CPU in write
// calls, on both ends).
type corker interface {
	Cork()
	Uncork()
}

// cork holds the client's writes until uncork (or a wait for its window).
func (rs *replayRun) cork() {
	if c, ok := rs.cl.Net.Conn.(corker); ok {
		c.Cork()
		rs.corked = c
	}
}

func (rs *replayRun) uncork() {
	if rs.corked != nil {
		rs.corked.Uncork()
		rs.corked = nil
	}
}

// yield gives the replay's slot up, waits until its client's window has
// room, and takes a slot again.
func (rs *replayRun) yield(ctx context.Context) error {
	rs.slotted = false
	rs.r.release()
	rs.yields++
	t0 := time.Now()
	for wait := time.Millisecond; !rs.windowOpen(); wait = min(2*wait, replayYieldPoll) {
		if rs.cl.Closed() {
			return errors.New("client gone")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	t1 := time.Now()
	rs.windowed += t1.Sub(t0)
	if err := rs.r.acquire(ctx); err != nil {
		return err
	}
	rs.slotted = true
	rs.reslotting += time.Since(t1)
	return nil
}

// take delivers rec, or keeps it behind a live delivery not yet written
// (the last pass: replay_defer.go).
func (rs *replayRun) take(ctx context.Context, rec *kgo.Record) error {
	if rs.later.waits(tp{rec.Topic, rec.Partition}) {
		rs.later.keep(rec)
		return nil
	}
	return rs.deliverRecord(ctx, rec)
}

// deliverRecord delivers rec (deliver) with its headers.
func (rs *replayRun) deliverRecord(ctx context.Context, rec *kgo.Record) error {
	rs.hdrs = rs.hdrs[:0]
	for _, h := range rec.Headers {
		rs.hdrs = append(rs.hdrs, topicmap.Header{Key: h.Key, Value: h.Value})
	}
	return rs.deliver(ctx, rec, rs.hdrs)
}

// deliver writes one record to the client if it matches a subscription.
func (rs *replayRun) deliver(ctx context.Context, rec *kgo.Record, hdrs []topicmap.Header) error {
	d, err := rs.r.tm.Reverse(rec.Topic, hdrs)
	if err != nil {
		return nil // excluded or unmappable: nobody subscribed to it
	}
	std, _ := topicmap.ParseStandard(hdrs)
	qos := d.RecordQoS(std)
	// A subscription's time bounds what a partition read from a time owes
	// it. A reverse partition read from the session's position owes it
	// every record from there, however old: the reverse path hands records
	// out at its own pace, not at their timestamps (a backlog older than
	// the subscription reached it live), and the position is never past
	// what it handed out while the session was live. Skipping them here
	// lost them for good: the replay counts the partition as handled to its
	// end, and the reverse path's live deliveries of them are discarded as
	// copies (replay_copies.go).
	byTime := !rs.positioned[tp{rec.Topic, rec.Partition}] || !rs.r.isReverse(rec.Topic)
	var best *state.Subscription
	var ids []int
	for i := range rs.subs {
		s := &rs.subs[i]
		if !topicmap.MatchFilter(s.Filter, d.Topic) || byTime && rec.Timestamp.UnixMilli() < s.Since ||
			s.NoLocal && std.ClientID == rs.cl.ID {
			continue
		}
		if s.Identifier > 0 {
			ids = append(ids, s.Identifier)
		}
		if best == nil || s.QoS > best.QoS {
			best = s
		}
	}
	if best == nil || min(qos, best.QoS) == 0 {
		return nil
	}
	c := Coord{rec.Topic, rec.Partition, rec.Offset}
	if !rs.r.h.mayRead(rs.cl, d.Topic) {
		// The connection's user may not read it (the session may have been
		// another user's: docs/security.md), as mochi withholds it from a live
		// delivery: not delivered, not counted in state.max_queued. The
		// position moves past it with the partition's; a resend the record
		// owed for it goes with the others the replay does not deliver
		// (endResend).
		return nil
	}
	pid, resend, skip := rs.o.pos.replayAction(c)
	if skip {
		// In flight here: mochi resends it. A live delivery not yet
		// written: the partition's later records wait for it.
		if rs.later != nil {
			if id, ok := rs.o.live.unwrittenAt(c); ok {
				rs.later.block(rec, id)
			}
		}
		return nil
	}
	if rs.later != nil && rs.o.live.wasLive(c) {
		// Written live while the last pass ran: its acknowledgement moves
		// the position; sent again it would be a duplicate.
		return nil
	}
	now := time.Now()
	var expiry uint32
	if asked := int64(std.Expiry); asked > 0 {
		// What the publisher asked, capped as mochi caps it when it
		// receives a message (mqtt.max_message_expiry, 0: none); a
		// message that asked none never expires.
		if limit := rs.r.h.server.Options.Capabilities.MaximumMessageExpiryInterval; limit > 0 {
			asked = min(asked, limit)
		}
		left := rec.Timestamp.Add(time.Duration(asked) * time.Second).Sub(now)
		if left <= 0 {
			return nil // expired while queued [MQTT-3.3.2-5]
		}
		expiry = uint32(max(left/time.Second, 1))
	}
	outQoS := min(qos, best.QoS)
	if q := rs.o.pos.resendQoS(pid); resend && q > 0 {
		outQoS = q // a resend is the same delivery: its QoS stays [MQTT-4.3.3]
	}
	dup := resend || rs.o.pos.wasDelivered(c)
	counted := rs.backlog && !resend
	if counted && rs.r.maxQueued > 0 && rs.queued >= rs.r.maxQueued {
		rs.r.queueDrops.Inc() // its position moves past it with the partition's
		return nil
	}
	if err := rs.waitWindow(ctx); err != nil {
		if resend { // as if this record had not been reached
			rs.o.pos.keepResend(c, pid)
		}
		return err
	}
	if counted {
		rs.queued++
	}
	if !resend {
		var err error
		if pid, err = rs.nextPacketID(); err != nil {
			return err
		}
	}
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: outQoS, Dup: dup},
		TopicName:   d.Topic, Payload: rec.Value, PacketID: pid, Created: now.Unix(),
	}
	if expiry > 0 {
		out.Properties.MessageExpiryInterval = expiry
		out.Expiry = now.Unix() + int64(expiry)
	}
	if props, _ := topicmap.HeadersToUserProps(nil, hdrs); len(props) > 0 {
		for _, p := range props {
			out.Properties.User = append(out.Properties.User, packets.UserProperty{Key: p.Key, Val: p.Value})
		}
	}
	if rs.cl.Properties.ProtocolVersion == 5 && len(ids) > 0 {
		out.Properties.SubscriptionIdentifier = ids
	}
	if best.RetainAsPublished && (d.Retain || std.HasRetain && std.Retain) {
		out.FixedHeader.Retain = true
	}
	if d := rs.r.h.deliverer; d != nil {
		d.PutInFlight(rs.cl, out.PacketID) // its place in the redelivery order
	}
	if rs.cl.State.Inflight.Set(out) {
		atomic.AddInt64(&rs.r.h.server.Info.Inflight, 1)
		rs.cl.State.Inflight.DecreaseSendQuota()
	}
	rs.o.pos.sent(out.PacketID, c, out.FixedHeader.Qos)
	if err := rs.cl.WritePacket(out); err != nil {
		return fmt.Errorf("replay to %s: %w", rs.cl.ID, err)
	}
	rs.delivered++
	if dup {
		rs.r.metrics.replayedDup.Inc()
	} else {
		rs.r.metrics.replayedNew.Inc()
	}
	if !rs.first {
		rs.first, rs.firstAt = true, time.Now()
		rs.r.metrics.replayFirst.Observe(time.Since(rs.connected).Seconds())
	}
	return nil
}

// nextPacketID is a free packet id that no pending resend holds.
func (rs *replayRun) nextPacketID() (uint16, error) {
	for range 65536 {
		id, err := rs.cl.NextPacketID()
		if err != nil {
			return 0, fmt.Errorf("replay to %s: %w", rs.cl.ID, err)
		}
		if !rs.o.pos.reserved(uint16(id)) {
			// A copy marked under it left flight unwritten (mochi
			// dropped it): the mark is stale.
			rs.r.h.copies.unmark(rs.cl, uint16(id))
			return uint16(id), nil
		}
	}
	return 0, fmt.Errorf("replay to %s: no free packet id", rs.cl.ID)
}

// waitWindow waits until the client has fewer unacknowledged messages than
// it may receive. Once it has waited replaySlotPatience while another
// replay waits for a slot, it fails with errYieldSlot instead: the caller
// gives its slot up (yield) and comes back to the same record.
func (rs *replayRun) waitWindow(ctx context.Context) error {
	if rs.windowOpen() {
		return nil
	}
	rs.uncork() // what it waits for answers what is held
	t0 := time.Now()
	defer func() { rs.windowed += time.Since(t0) }()
	for !rs.windowOpen() {
		if rs.slotted && rs.r.waiting.Load() > 0 && time.Since(t0) >= replaySlotPatience {
			return errYieldSlot
		}
		if err := rs.pause(ctx); err != nil {
			return err
		}
	}
	return nil
}

// windowOpen reports whether the client may receive one more replayed
// message: fewer unacknowledged than its Receive Maximum (replayWindowV3
// for MQTT 3.1.1), live deliveries not yet written aside.
func (rs *replayRun) windowOpen() bool {
	window := replayWindowV3
	if rs.cl.Properties.ProtocolVersion == 5 && rs.cl.Properties.Props.ReceiveMaximum > 0 {
		window = int(rs.cl.Properties.Props.ReceiveMaximum)
	}
	// Live deliveries not yet written, and live copies to be discarded
	// (replay_copies.go), are in flight but not the client's to
	// acknowledge yet: the held ones wait for this pass, and a window full
	// of them would never free.
	return rs.cl.State.Inflight.Len()-rs.o.live.held()-rs.r.h.copies.pending(rs.cl) < window
}

// pause waits a millisecond, or fails when the client or the replay ends.
func (rs *replayRun) pause(ctx context.Context) error {
	if rs.cl.Closed() {
		return errors.New("client gone")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Millisecond):
		return nil
	}
}

// candidates lists the Kafka topics the subscriptions can draw from.
func (rs *replayRun) candidates(ctx context.Context) ([]string, error) {
	t := rs.liveAt
	if t.IsZero() {
		t = time.Now().Add(-rs.r.topics.maxAge)
	}
	idx, err := rs.r.topics.indexed(ctx, t, rs.r.isReverse)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	rs.o.pos.topics(func(t string) {
		if idx.all[t] {
			add(t)
		}
	})
	for _, name := range idx.reverse {
		add(name)
	}
	for _, s := range rs.subs {
		idx.matching(s.Filter, add)
	}
	return out, nil
}

// timeLookupGrain (ms) rounds the subscriptions' times a replay looks up
// offsets by (pass).
const timeLookupGrain = 1000

func (rs *replayRun) oldestSince() int64 {
	oldest := int64(0)
	for _, s := range rs.subs {
		if oldest == 0 || s.Since < oldest {
			oldest = s.Since
		}
	}
	return oldest
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// spans formats each partition's start..end for the debug log, in order.
func spans(starts, ends map[tp]int64) string {
	keys := make([]tp, 0, len(ends))
	for k := range ends {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].less(keys[j])
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s/%d:%d..%d ", k.topic, k.part, starts[k], ends[k])
	}
	return strings.TrimSpace(b.String())
}
