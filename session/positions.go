package session

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// A persistent session's queue is a position in Kafka, not a copy: every
// message Ferry can deliver is in a Kafka topic already (the forward path
// wrote it before its PUBACK; the reverse path read it from one). For each
// Kafka partition a session has been given messages from, the session keeps
//
//	position  = the offset of its oldest delivery not yet acknowledged, or
//	            one past the newest acknowledged when none is pending
//	delivered = one past the newest acknowledged delivery
//
// and writes them into its session record every checkpointEvery and when
// the client goes. A resume, on any instance, reads every partition its
// subscriptions can draw from, from the position (partitions without one:
// from the time of the subscription), and delivers what matches: nothing
// acknowledged after the last checkpoint is skipped, and what was
// acknowledged but not yet checkpointed comes again (counted as duplicates,
// offset < delivered). While a client is offline nothing is queued for it
// in memory.
//
// How a delivery learns its Kafka coordinates: whoever injects a message
// into the broker (the forward path's local delivery once Kafka acknowledged
// the record, the reverse path, a replay) registers the record's coordinate
// under its injecting client id for the duration of the injection; mochi
// delivers on the injecting goroutine and calls OnQosPublish for each
// subscriber, which looks the coordinate up by the packet's origin.

// Coord is where a message sits in Kafka: its topic, partition and
// offset; Offset < 0: unknown.
type Coord struct {
	Topic     string
	Partition int32
	Offset    int64
}

// tp names one Kafka partition.
type tp struct {
	topic string
	part  int32
}

func (c Coord) tp() tp { return tp{c.Topic, c.Partition} }

// less orders partitions by topic, then number.
func (k tp) less(o tp) bool { return k.topic < o.topic || k.topic == o.topic && k.part < o.part }

// sessionPositions is one owned persistent session's positions (guarded by
// its own mutex: updated on delivery and acknowledgement goroutines).
type sessionPositions struct {
	mu        sync.Mutex
	base      map[tp]int64 // from the record: where a replay would start
	delivered map[tp]int64 // one past the newest acknowledged offset
	pending   map[uint16]Coord
	// flows are the pending deliveries' QoS and PUBREC state, by packet
	// id (a delivery without one: QoS unknown, no PUBREC).
	flows map[uint16]flow
	// resend are pending deliveries no broker here holds in flight (the
	// session resumes from its record): the replay resends them with their
	// packet id and DUP.
	resend map[Coord]uint16
	// inherited are the deliveries in flight when the session resumed on
	// this instance: mochi resends them itself, and the replay must skip
	// them even once the client has acknowledged the resend (it may, before
	// the replay reaches them).
	inherited map[Coord]bool
	// frontier is, for each partition a replay reads, the offset of the
	// first record it has not handed out yet. A position never passes it:
	// the client may acknowledge a later message (a live delivery) before
	// the replay has sent the older ones, and a position moved past those
	// would skip them at the next resume. It stays at a partition's end
	// between the replay's passes (replayed) and goes when the replay has
	// caught up (caughtUp).
	frontier map[tp]int64
	// reverse caps the positions of partitions the reverse path consumes
	// at what it has handed out (nil: no reverse path; reverse_progress.go),
	// but only what it handed out while the session was live: offline, or
	// resuming until its replay caught up, the caps are those of the moment
	// it stopped being live (frozen; missing or -1: nothing handed out).
	reverse *ReverseProgress
	offline bool
	gone    bool // its client went (wentOffline) and no connection took it since (inherit)
	frozen  map[tp]int64
	// missed is, per partition, the oldest message mochi dropped instead of
	// delivering (its client's outbound queue was full): a position stays
	// at it until a replay reads past it.
	missed map[tp]int64
	// drops are the dropped deliveries of partitions a replay reads now
	// (frontier): a pass that met one as pending skipped it, and delivers
	// it after all (takeDropped, replay_defer.go).
	drops map[Coord]bool
	// changes counts the changes to what snapshot returns; written is the
	// count a write of the record (claim, checkpoint) has made durable. A
	// read (a replay's) changes neither: it once cleared a dirty flag, and
	// the checkpoint of the acknowledgements before it was not written.
	changes, written uint64

	// The horizon (unix ms) covers the partitions of the reverse topics
	// that have no position: every record there with an older timestamp
	// was handed out while the session was live, or read by its replay, or
	// is older than its subscriptions. A resume reads such a partition
	// from the horizon rather than from the subscription's time (which can
	// be days back: every reverse topic may carry any MQTT topic, so a
	// replay reads them all). It is the largest of the record's
	// (fromHorizon), the last replay's (covered: its last listing's time
	// less HorizonSlack) and, while live, the reverse path's
	// (ReverseProgress.check); frozen while offline.
	fromHorizon, covered, frozenHorizon, writtenHorizon int64
	// replaying is set while a replay reads: the partitions' positions
	// from its passes are kept in the record until it caught up.
	replaying bool

	// replayedTo is, for each partition a replay of this session has read
	// on this instance, the end it read to (replayed), and replayedFor the
	// filters of the last replay's subscriptions: a live delivery of a
	// record below that end, on a topic those filters match, is a copy of
	// one the replay handled (delivered, or needed no delivery), and is
	// not delivered again (liveCopy).
	replayedTo  map[tp]int64
	replayedFor []string
	// timeFrom is, for each partition a replay read from a time (no
	// position: the subscriptions' time or the horizon), the offset it
	// started at. A live delivery below it is no copy: the replay did not
	// read it, and owed it nothing (older than the subscriptions), but the
	// live path hands it out now, as it does to a clean session.
	timeFrom map[tp]int64
}

// horizonRefresh is how far the horizon moves before a connected session's
// record is written for it alone (its positions did not move): an idle
// session's resume after a crash reads at most this much more.
const horizonRefresh = time.Minute

func newSessionPositions(from []state.Position, pending []state.Pending, horizon int64, reverse *ReverseProgress) *sessionPositions {
	p := &sessionPositions{base: map[tp]int64{}, delivered: map[tp]int64{}, pending: map[uint16]Coord{}, flows: map[uint16]flow{},
		resend: map[Coord]uint16{}, frontier: map[tp]int64{}, missed: map[tp]int64{}, drops: map[Coord]bool{},
		replayedTo: map[tp]int64{}, timeFrom: map[tp]int64{}, reverse: reverse, fromHorizon: horizon, writtenHorizon: horizon}
	for _, q := range from {
		k := tp{q.Topic, q.Partition}
		p.base[k] = q.Offset
		if q.Delivered > 0 {
			p.delivered[k] = q.Delivered
		}
		if q.Offset < q.Delivered {
			// Something below the newest acknowledged delivery is owed (in
			// flight, or dropped by mochi: missed): the position stays
			// there until a replay reads past it.
			p.missed[k] = q.Offset
		}
	}
	for _, d := range pending {
		c := Coord{d.Topic, d.Partition, d.Offset}
		p.pending[d.PacketID] = c
		p.resend[c] = d.PacketID
		if d.QoS > 0 {
			p.flows[d.PacketID] = flow{qos: d.QoS, released: d.Released}
		}
	}
	return p
}

// flow is one pending delivery's QoS and, for QoS 2, whether the client's
// PUBREC came (the server sent PUBREL).
type flow struct {
	qos      byte
	released bool
}

// replayAction says what a replay does with the message at c: resend it
// under packet id pid (DUP), skip it (a broker here resends it), or deliver
// it anew.
func (p *sessionPositions) replayAction(c Coord) (pid uint16, resend, skip bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.resend[c]; ok {
		delete(p.resend, c)
		return id, true, false
	}
	if p.inherited[c] {
		return 0, false, true
	}
	for _, q := range p.pending {
		if q == c {
			return 0, false, true
		}
	}
	return 0, false, false
}

// keepResend undoes replayAction's resend of the message at c under pid:
// the replay stopped before writing it (it yields its slot, replay.go) and
// meets it again.
func (p *sessionPositions) keepResend(c Coord, pid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.pending[pid]; ok && q == c {
		p.resend[c] = pid
	}
}

// forget drops the delivery under packet id pid, in flight here, that the
// session's new connection may not read (screenLocal): mochi does not
// resend it, and it no longer holds the position. A position is where the
// next replay starts reading; a message the session's user may not read is
// not owed to it, like any record a replay reads and does not deliver.
func (p *sessionPositions) forget(pid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.pending[pid]; ok {
		delete(p.pending, pid)
		delete(p.flows, pid)
		delete(p.inherited, c)
		p.changes++
	}
}

// handBack gives the delivery under packet id pid, in flight here, to the
// replay: mochi does not resend it, as its topic cannot be checked
// (screenLocal). It stays pending; the replay resends it under pid, with
// DUP and its topic name, if the ACL allows, and else skips it (replay.go
// deliver); if it does not meet it, endResend forgets it.
func (p *sessionPositions) handBack(pid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.pending[pid]; ok {
		delete(p.inherited, c)
		p.resend[c] = pid
	}
}

// reserved reports whether pid must not be given to a new delivery yet.
func (p *sessionPositions) reserved(pid uint16) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.resend {
		if id == pid {
			return true
		}
	}
	return false
}

// inherit notes the deliveries in flight now, which mochi resends on a
// resume on this instance (see inherited).
func (p *sessionPositions) inherit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = false
	p.inherited = make(map[Coord]bool, len(p.pending))
	for _, c := range p.pending {
		p.inherited[c] = true
	}
}

// endResend forgets resends the replay did not find (their records are
// gone from Kafka): their packet ids are free again. The inherited
// deliveries are older than the first pass's end: the later pass never
// meets them.
func (p *sessionPositions) endResend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inherited = nil
	for c, id := range p.resend {
		delete(p.resend, c)
		delete(p.pending, id)
		delete(p.flows, id)
	}
}

// sent records a delivery (packet id pid) at QoS qos of the message at c.
func (p *sessionPositions) sent(pid uint16, c Coord, qos byte) {
	if c.Offset < 0 {
		return
	}
	p.mu.Lock()
	p.pending[pid] = c
	p.flows[pid] = flow{qos: qos}
	p.changes++
	p.mu.Unlock()
}

// released records that the client's PUBREC of the QoS 2 delivery under
// pid came (the server sent its PUBREL): a resume resends the PUBREL.
func (p *sessionPositions) released(pid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.flows[pid]; ok && !f.released {
		f.released = true
		p.flows[pid] = f
		p.changes++
	}
}

// resendQoS is the QoS the delivery under pid was first sent with (0: not
// recorded): its resend keeps it [MQTT-4.3.3].
func (p *sessionPositions) resendQoS(pid uint16) byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flows[pid].qos
}

// takeReleased returns the packet ids of the resends whose PUBREC had
// come, in the order of their ids, and takes them from the resends: the
// replay sends their PUBREL, not their PUBLISH, and they stay pending
// until the client's PUBCOMP. Their messages were delivered (the client
// sent PUBREC): the replay skips them even once the PUBCOMP came, as it
// skips what mochi resends here (inherited) [MQTT-4.3.3].
func (p *sessionPositions) takeReleased() []uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uint16
	for c, id := range p.resend {
		if p.flows[id].released {
			delete(p.resend, c)
			out = append(out, id)
			if p.inherited == nil {
				p.inherited = map[Coord]bool{}
			}
			p.inherited[c] = true
		}
	}
	slices.Sort(out)
	return out
}

// dropped records that mochi dropped the delivery of the message at c,
// whether it had put it in flight first (recorded as pending under a
// packet id mochi frees again: a full outbound queue) or refused it before
// (its in-flight cap): the position stays at c and a later resume delivers
// it. False: c is no Kafka coordinate.
func (p *sessionPositions) dropped(c Coord) bool {
	if c.Offset < 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, q := range p.pending {
		if q == c {
			delete(p.pending, pid)
			delete(p.flows, pid)
		}
	}
	k := c.tp()
	if m, ok := p.missed[k]; !ok || c.Offset < m {
		p.missed[k] = c.Offset
	}
	if _, ok := p.frontier[k]; ok {
		p.drops[c] = true
	}
	p.changes++
	return true
}

// droppedID is dropped for the delivery pending under packet id pid (mochi
// dropped it from flight); false: none was pending under pid.
func (p *sessionPositions) droppedID(pid uint16) bool {
	p.mu.Lock()
	c, ok := p.pending[pid]
	p.mu.Unlock()
	return ok && p.dropped(c)
}

// takeDropped reports, once, whether the delivery of the message at c was
// dropped while a replay read its partition.
func (p *sessionPositions) takeDropped(c Coord) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.drops[c] {
		return false
	}
	delete(p.drops, c)
	return true
}

// isPending reports whether a delivery under packet id pid awaits its
// acknowledgement.
func (p *sessionPositions) isPending(pid uint16) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.pending[pid]
	return ok
}

// acked records the client's acknowledgement of packet id pid.
func (p *sessionPositions) acked(pid uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.pending[pid]
	if !ok {
		return
	}
	delete(p.pending, pid)
	delete(p.flows, pid)
	k := c.tp()
	if c.Offset+1 > p.delivered[k] {
		p.delivered[k] = c.Offset + 1
	}
	p.changes++
}

// reading records that a replay has handed out partition k's records
// before next (see frontier).
func (p *sessionPositions) reading(k tp, next int64) {
	p.mu.Lock()
	p.frontier[k] = next
	p.changes++
	p.mu.Unlock()
}

// replayed records that a replay read partition k up to end (exclusive):
// what it did not deliver there needs no delivery. The frontier stays at
// end until caughtUp: after the first pass the subscriptions go live, and
// the records appended meanwhile come with the last pass; a live delivery
// acknowledged before that pass reached them must not move the position
// past them.
func (p *sessionPositions) replayed(k tp, end int64) {
	p.mu.Lock()
	p.frontier[k] = end
	if m, ok := p.missed[k]; ok && m < end {
		delete(p.missed, k)
	}
	for c := range p.drops {
		if c.tp() == k && c.Offset < end {
			delete(p.drops, c)
		}
	}
	if end > p.base[k] {
		p.base[k] = end
	}
	if end > p.replayedTo[k] {
		p.replayedTo[k] = end
	}
	p.changes++
	p.mu.Unlock()
}

// startedByTime records that a replay reads partition k from offset from,
// found by time (the first such start stands).
func (p *sessionPositions) startedByTime(k tp, from int64) {
	p.mu.Lock()
	if _, ok := p.timeFrom[k]; !ok {
		p.timeFrom[k] = from
	}
	p.mu.Unlock()
}

// liveCopy reports whether a live delivery of the message at c, on MQTT
// topic topic, is a copy of a record a replay of this session handled:
// below the end that replay read c's partition to, on a topic its
// subscriptions match. The reverse path hands a partition out at its own
// pace: behind the replay's end when it lags, or from the partition's
// start when it finds the topic only after the resume (a new topic of a
// /regex/); what it hands out below that end came with the replay. A
// filter subscribed while the replay ran is not among replayedFor: its
// live deliveries are never taken for copies.
func (p *sessionPositions) liveCopy(c Coord, topic string) bool {
	if c.Offset < 0 || topic == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if end, ok := p.replayedTo[c.tp()]; !ok || c.Offset >= end {
		return false
	}
	if from, ok := p.timeFrom[c.tp()]; ok && c.Offset < from {
		return false
	}
	for _, f := range p.replayedFor {
		if topicmap.MatchFilter(f, topic) {
			return true
		}
	}
	return false
}

// caughtUp records that the replay delivered everything up to its last
// pass: positions follow the acknowledgements alone again, and the session
// is live. covered is that replay's horizon (0: none ran): its last pass
// listed the end offsets at covered + HorizonSlack, after the
// subscriptions went live, and read every reverse partition to them.
func (p *sessionPositions) caughtUp(covered int64) {
	p.mu.Lock()
	clear(p.frontier)
	clear(p.drops)
	if !p.gone { // else the client went meanwhile: it stays offline, frozen
		p.offline, p.frozen = false, nil
	}
	p.covered = max(p.covered, covered)
	p.replaying = false
	p.changes++
	p.mu.Unlock()
}

// notLive marks a session resumed from its record: not live until its
// replay caught up.
func (p *sessionPositions) notLive() {
	p.mu.Lock()
	p.offline, p.frozenHorizon = true, p.fromHorizon
	p.mu.Unlock()
}

// startReplay marks a replay reading (see replaying) for subscriptions
// with filters filters.
func (p *sessionPositions) startReplay(filters []string) {
	p.mu.Lock()
	p.replaying = true
	p.replayedFor = filters
	p.mu.Unlock()
}

// horizonLocked is the horizon now; under mu.
func (p *sessionPositions) horizonLocked() int64 {
	if p.offline {
		return p.frozenHorizon
	}
	return max(p.fromHorizon, p.covered, p.reverse.currentHorizon())
}

// horizon returns the horizon to write with the positions, and notes it
// as written.
func (p *sessionPositions) horizon() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writtenHorizon = p.horizonLocked()
	return p.writtenHorizon
}

// resumeHorizon is the horizon a replay reads the reverse partitions
// without a position from.
func (p *sessionPositions) resumeHorizon() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.horizonLocked()
}

// horizonStale reports whether the horizon moved horizonRefresh past the
// one last written.
func (p *sessionPositions) horizonStale() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.horizonLocked()-p.writtenHorizon >= horizonRefresh.Milliseconds()
}

// wentOffline freezes the reverse path's caps of a live session whose
// client went: what the reverse path hands out from now on does not reach
// it.
func (p *sessionPositions) wentOffline() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	if p.offline {
		return
	}
	p.frozenHorizon = p.horizonLocked()
	p.offline, p.frozen = true, map[tp]int64{}
	freeze := func(k tp) {
		if next, applies, known := p.reverse.limit(k); applies && known {
			p.frozen[k] = next
		} else if applies {
			p.frozen[k] = -1 // not known: see reverseLimit
		}
	}
	for k := range p.delivered {
		freeze(k)
	}
	for _, c := range p.pending {
		freeze(c.tp())
	}
	for k := range p.missed {
		freeze(k)
	}
}

// reverseLimit is ReverseProgress.limit for a live session, the frozen
// caps otherwise; under mu.
func (p *sessionPositions) reverseLimit(k tp) (next int64, applies, known bool) {
	if !p.offline {
		return p.reverse.limit(k)
	}
	if p.reverse == nil {
		return 0, false, false
	}
	// Frozen when the client went (unknown: -1); otherwise a cap applies
	// to reverse.topics, and to every topic when read on demand.
	next, frozen := p.frozen[k]
	if !frozen {
		return 0, p.reverse.static(k.topic) || p.reverse.onDemand, false
	}
	return next, true, next >= 0
}

// pendingList returns the unacknowledged deliveries to write.
func (p *sessionPositions) pendingList() []state.Pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]state.Pending, 0, len(p.pending))
	for id, c := range p.pending {
		f := p.flows[id]
		out = append(out, state.Pending{PacketID: id, Topic: c.Topic, Partition: c.Partition, Offset: c.Offset,
			QoS: f.qos, Released: f.released})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PacketID < out[j].PacketID })
	return out
}

// generation is the count of changes so far: a writer takes it before
// snapshot (fill) and hands it to wrote once the record is acknowledged.
func (p *sessionPositions) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes
}

// fill sets rec's positions, pending deliveries and horizon to what they
// are now and returns their generation, for wrote once rec is durable. The
// generation is taken first: a change made meanwhile keeps them dirty.
func (p *sessionPositions) fill(rec *state.Session) uint64 {
	gen := p.generation()
	rec.Positions, rec.Pending, rec.Horizon = p.snapshot(), p.pendingList(), p.horizon()
	return gen
}

// wrote records that a record with the positions of generation gen is
// durable: the positions are clean unless they changed since.
func (p *sessionPositions) wrote(gen uint64) {
	p.mu.Lock()
	p.written = max(p.written, gen)
	p.mu.Unlock()
}

// topics calls yield with the topic of every partition snapshot may
// return a position for, and more: the partitions of the reverse topics
// it leaves out too (a replay reads all of those anyway). A topic may come
// more than once. For a replay's choice of topics, without snapshot's
// maps and sort.
func (p *sessionPositions) topics(yield func(string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.base {
		yield(k.topic)
	}
	for k := range p.delivered {
		yield(k.topic)
	}
	for _, c := range p.pending {
		yield(c.Topic)
	}
	for k := range p.missed {
		yield(k.topic)
	}
	for k := range p.frontier {
		yield(k.topic)
	}
}

// snapshot returns the positions a record holds now (to write, or to
// read from).
func (p *sessionPositions) snapshot() []state.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	pos := make(map[tp]int64, len(p.base)+len(p.delivered))
	for k, o := range p.base {
		pos[k] = o
	}
	for k, o := range p.delivered {
		pos[k] = max(pos[k], o)
	}
	for _, c := range p.pending {
		k := c.tp()
		if cur, ok := pos[k]; !ok || c.Offset < cur {
			pos[k] = c.Offset
		}
	}
	for k, m := range p.missed {
		if cur, ok := pos[k]; !ok || m < cur {
			pos[k] = m
		}
	}
	for k, f := range p.frontier {
		if cur, ok := pos[k]; !ok || f < cur {
			pos[k] = f
		}
	}
	// A partition a caught-up replay only read (nothing delivered, pending
	// or missed there since) needs no position: the horizon, written with
	// it, covers it from the replay's last listing on, and its position
	// would stay there while the reverse path moves on.
	if !p.replaying && p.covered > 0 && p.reverse != nil {
		busy := make(map[tp]bool, len(p.pending))
		for _, c := range p.pending {
			busy[c.tp()] = true
		}
		for k := range pos {
			_, d := p.delivered[k]
			_, m := p.missed[k]
			_, f := p.frontier[k]
			if !d && !m && !f && !busy[k] && p.reverse.static(k.topic) {
				delete(pos, k)
			}
		}
	}
	for k, o := range pos {
		base, hasBase := p.base[k]
		switch next, applies, known := p.reverseLimit(k); {
		case !applies:
		case known:
			// Below the base the records were handed out already (a replay).
			pos[k] = min(o, max(next, base))
		case hasBase:
			pos[k] = min(o, base)
		default:
			// Nothing of k handed out by the reverse path yet, and no base:
			// no position (not even a pending local delivery's), so a
			// resume reads k from the subscription's time.
			delete(pos, k)
		}
	}
	out := make([]state.Position, 0, len(pos))
	for k, o := range pos {
		out = append(out, state.Position{Topic: k.topic, Partition: k.part, Offset: o, Delivered: p.delivered[k]})
	}
	slices.SortFunc(out, func(a, b state.Position) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// wasDelivered reports whether the message at c was acknowledged before
// (a replay of it is a duplicate).
func (p *sessionPositions) wasDelivered(c Coord) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.Offset < p.delivered[c.tp()]
}

// isDirty reports whether the positions changed since the last record
// written with them (wrote).
func (p *sessionPositions) isDirty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes != p.written
}
