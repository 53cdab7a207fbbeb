package session

import (
	"sync"
	"time"
)

// ReverseProgress is how far this instance's reverse path has handed out
// each partition it consumes. A persistent session's position must not
// pass it.
//
// A partition the reverse path consumes can reach a live session by two
// paths: the records this instance's MQTT publishers wrote come through the
// forward path's local delivery as soon as Kafka acknowledges them, the
// others (written by other instances or by Kafka producers) through the
// reverse consumer, which may lag seconds behind (its pacing waits for slow
// subscribers). A session that acknowledged a local delivery at offset 40
// while the reverse path had handed out only up to 17 would otherwise write
// position 41, and a resume elsewhere would skip 17..39 for good: a
// publisher that reconnected from a killed instance to this one splits its
// stream exactly so.
//
// The reverse consumer skips this instance's own records (reverse.skip_own):
// the local delivery brings them. So it can hand out past an own record
// whose local delivery still waits (Kafka has acknowledged it; the
// publisher's earlier publishes are not acknowledged yet, and acknowledgements
// and local deliveries go in the publisher's order). A session that
// acknowledged a later record and then went would have a position past a
// message it never got. Such records hold the limit at their offset until
// delivered (LocalAcked, LocalDelivered): a QoS 1 publish's until its ack
// queue delivered it, a QoS 2 publish's until mochi delivered it after the
// PUBREC (the caller's forward path: bridge's acks.go, hook.publishQoS2).
type ReverseProgress struct {
	serves   func(kafkaTopic string) bool // among reverse.topics
	consumed sync.Map                     // Kafka topic -> serves(topic), cached for the forward path
	demand   sync.Map                     // Kafka topic -> struct{}: read on demand now (Demand)
	// onDemand: topics are read on demand (reverse.on_demand), so any
	// topic may carry other instances' records for a live subscription,
	// read or about to be: every position is capped, and one of a topic
	// not read yet is not known (a resume reads it from the
	// subscription's time).
	onDemand bool

	mu    sync.RWMutex
	next  map[tp]int64           // the offset after the last record handed out
	local map[tp]map[int64]int32 // own records acknowledged, not yet delivered here
	// own are this instance's records delivered here that the reverse path
	// has not handed out yet (it skips them): what it handed out reaches
	// past them (limit), so that a session whose client acknowledged its
	// local delivery of one is not sent it again after the reverse path
	// merely had not fetched it yet. At most ownMax per partition.
	own map[tp]map[int64]struct{}
	// caught is when each consumed partition was last seen handed out to
	// its end (check); horizon is what that says for all of them.
	caught  map[tp]time.Time
	horizon int64
}

func newReverseProgress(serves func(string) bool, onDemand bool) *ReverseProgress {
	return &ReverseProgress{serves: serves, onDemand: onDemand, next: map[tp]int64{}, local: map[tp]map[int64]int32{},
		own: map[tp]map[int64]struct{}{}, caught: map[tp]time.Time{}}
}

// caps reports whether positions in Kafka topic t are capped by what the
// reverse path handed out: it consumes t, or may read it on demand.
func (p *ReverseProgress) caps(t string) bool { return p.onDemand || p.consumes(t) }

// consumes reports whether the reverse path consumes Kafka topic t: among
// reverse.topics, or read on demand now.
func (p *ReverseProgress) consumes(t string) bool {
	if p.static(t) {
		return true
	}
	_, ok := p.demand.Load(t)
	return ok
}

// static reports whether t is among reverse.topics: consumed by every
// instance all the time, which is what a horizon covers.
func (p *ReverseProgress) static(t string) bool {
	if v, ok := p.consumed.Load(t); ok {
		return v.(bool)
	}
	ok := p.serves(t)
	p.consumed.Store(t, ok)
	return ok
}

// Consumes reports whether the reverse path reads Kafka topic t now: one
// of reverse.topics, or read on demand.
func (p *ReverseProgress) Consumes(t string) bool { return p.consumes(t) }

// Demand records that this instance started (reading true: after the
// Handled of each partition's start) or stopped reading Kafka topic t on
// demand for its live subscriptions. What was handed out of a topic no
// longer read is forgotten: read again, it starts where its new start says.
func (p *ReverseProgress) Demand(t string, reading bool) {
	if reading {
		p.demand.Store(t, struct{}{})
		return
	}
	p.demand.Delete(t)
	p.mu.Lock()
	for k := range p.next {
		if k.topic == t {
			delete(p.next, k)
		}
	}
	for k := range p.own {
		if k.topic == t {
			delete(p.own, k)
		}
	}
	p.mu.Unlock()
}

// LocalAcked notes that the forward path's record at c, acknowledged by
// Kafka, waits for its local delivery; true: call LocalDelivered after it.
// A nil ReverseProgress (no reverse path) returns false.
func (p *ReverseProgress) LocalAcked(c Coord) bool {
	if p == nil || c.Offset < 0 || !p.caps(c.Topic) {
		return false
	}
	k := c.tp()
	p.mu.Lock()
	m := p.local[k]
	if m == nil {
		m = map[int64]int32{}
		p.local[k] = m
	}
	m[c.Offset]++
	p.mu.Unlock()
	return true
}

// LocalDelivered ends a LocalAcked.
func (p *ReverseProgress) LocalDelivered(c Coord) {
	k := c.tp()
	p.mu.Lock()
	if m := p.local[k]; m != nil {
		if m[c.Offset]--; m[c.Offset] <= 0 {
			delete(m, c.Offset)
		}
		if len(m) == 0 {
			delete(p.local, k)
		}
	}
	if next, known := p.next[k]; p.consumes(c.Topic) && (!known || c.Offset >= next) {
		o := p.own[k]
		if o == nil || len(o) >= ownMax {
			o = map[int64]struct{}{} // a bound, not a loss: a resume may send one again
			p.own[k] = o
		}
		o[c.Offset] = struct{}{}
	}
	p.mu.Unlock()
}

// ownMax bounds the own records kept per partition (ReverseProgress.own).
const ownMax = 4096

// Handled records that the reverse path has handed out the records of
// partition part of topic before next (delivered to the subscribers it
// found, or skipped).
func (p *ReverseProgress) Handled(topic string, part int32, next int64) {
	p.handled(tp{topic, part}, next)
}

func (p *ReverseProgress) handled(k tp, next int64) {
	p.mu.Lock()
	if cur, ok := p.next[k]; !ok || next > cur { // a start at 0 is known too
		p.next[k] = next
	}
	if o := p.own[k]; o != nil {
		for off := range o {
			if off < p.next[k] {
				delete(o, off)
			}
		}
		if len(o) == 0 {
			delete(p.own, k)
		}
	}
	p.mu.Unlock()
}

// limit returns the offset a position of k may not pass: applies is false
// when the reverse path does not consume k; known is false when it has
// handed out nothing of k yet.
func (p *ReverseProgress) limit(k tp) (next int64, applies, known bool) {
	if p == nil || !p.caps(k.topic) {
		return 0, false, false
	}
	p.mu.RLock()
	next, known = p.next[k]
	if known { // unknown stays unknown: nothing of k handed out yet
		for o := p.own[k]; ; next++ { // own records delivered here: handed out
			if _, ok := o[next]; !ok {
				break
			}
		}
		next = p.heldAt(k, next)
	}
	p.mu.RUnlock()
	return next, true, known
}

// heldAt lowers next, what has been handed out of k, to its oldest own
// record awaiting its local delivery; under mu.
func (p *ReverseProgress) heldAt(k tp, next int64) int64 {
	for off := range p.local[k] {
		next = min(next, off)
	}
	return next
}

// HorizonSlack is how far behind the time a record's Kafka timestamp may be
// (clocks of bridge hosts and brokers differ): the same second a
// subscription's time is taken early.
const HorizonSlack = time.Second

// check takes a listing of the consumed partitions' end offsets, requested
// at at (seen: for partitions nothing was handed out of yet in this run,
// an offset below which nothing is left to hand out: horizonWatch.startedAt),
// and moves the horizon: the
// time (unix ms) before which every record of every consumed partition has
// been handed out. A record appended after the listing was requested has a
// timestamp of at least at - HorizonSlack (as a subscription's time
// assumes), so one older than that sits below the end listed; a partition
// whose limit (own records awaiting local delivery included) reached its
// end had handed all of those out. Zero while any partition has never
// been seen so.
func (p *ReverseProgress) check(ends, seen map[tp]int64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := at
	for k, end := range ends {
		next, known := p.next[k]
		if !known {
			next, known = seen[k]
		}
		if end <= 0 || known && p.heldAt(k, next) >= end {
			p.caught[k] = at
		}
		c, ok := p.caught[k]
		if !ok {
			h = time.Time{}
		} else if !h.IsZero() && c.Before(h) {
			h = c
		}
	}
	for k := range p.caught {
		if _, ok := ends[k]; !ok {
			delete(p.caught, k)
		}
	}
	p.horizon = 0
	if !h.IsZero() && len(ends) > 0 {
		p.horizon = h.Add(-HorizonSlack).UnixMilli()
	}
}

// anyUnknown reports whether nothing of one of the partitions has been
// handed out yet.
func (p *ReverseProgress) anyUnknown(parts map[tp]int64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for k := range parts {
		if _, ok := p.next[k]; !ok {
			return true
		}
	}
	return false
}

// currentHorizon is the horizon of the last check (0: none yet, or a
// partition never caught up).
func (p *ReverseProgress) currentHorizon() int64 {
	if p == nil {
		return 0
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.horizon
}
