package share

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tp is a Kafka topic partition.
type tp struct {
	topic string
	part  int32
}

// delivery is a record handed to a member and not yet acknowledged.
type delivery struct {
	g      *group
	rec    *kgo.Record
	part   *partition // its partition's state when handed out (revoked: no longer the group's)
	member string     // who owes it now ("": handed back, waiting)
}

// partition is what the group owes in one partition Kafka assigned it.
type partition struct {
	next      int64              // after the last record handed out; -1: none yet
	owed      map[int64]struct{} // offsets handed out, not acknowledged
	committed int64              // the last offset committed; -1: none
	lag       int64
}

// state is a group's members and what they owe; its mutex guards it.
type state struct {
	mu      sync.Mutex
	members []string             // live members here, sorted
	load    map[string]int       // member -> deliveries it owes
	paused  map[string]time.Time // member -> until when it is not offered more (its queue was full)
	turn    int
	parts   map[tp]*partition
	back    []*delivery // owed by members that went: delivered again first

	// poll is what the delivery loop waits for records under (a handed
	// back delivery ends it: see pollContext).
	poll       context.Context
	pollCancel context.CancelFunc
}

func (s *state) init() {
	s.load, s.paused, s.parts = map[string]int{}, map[string]time.Time{}, map[tp]*partition{}
}

// fullFor is how long a member whose queue refused a delivery is passed
// over.
const fullFor = 50 * time.Millisecond

// setMembers replaces the live members.
func (g *group) setMembers(members []string) {
	g.mu.Lock()
	changed := !slices.Equal(g.members, members)
	g.members = members
	g.mu.Unlock()
	g.m.d.Metrics.Members.WithLabelValues(g.key).Set(float64(len(members)))
	if changed {
		g.signal()
	}
}

// signal wakes a delivery waiting for room.
func (g *group) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// leastLoaded is the member under limit with the fewest deliveries owed,
// ties in turn, leaving out those in either set and those passed over for
// a moment; false: none.
func (g *group) leastLoaded(limit int, denied, gone map[string]bool) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.members)
	if n == 0 {
		return "", false
	}
	var now time.Time
	if len(g.paused) > 0 {
		now = time.Now()
	}
	g.turn++
	best, least := "", limit
	for i := range n {
		id := g.members[(g.turn+i)%n]
		if g.load[id] >= least || denied[id] || gone[id] {
			continue
		}
		if until, ok := g.paused[id]; ok && now.Before(until) {
			continue
		}
		best, least = id, g.load[id]
	}
	return best, best != ""
}

// allOf reports whether every live member is in ids.
func (g *group) allOf(ids map[string]bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range g.members {
		if !ids[id] {
			return false
		}
	}
	return true
}

// full passes member id over for a moment.
func (g *group) full(id string) {
	g.mu.Lock()
	g.paused[id] = time.Now().Add(fullFor)
	g.mu.Unlock()
}

// partition returns rec's partition's state, nil when not assigned.
func (g *group) partition(rec *kgo.Record) *partition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.parts[tp{rec.Topic, rec.Partition}]
}

// handedOut records rec handed out: owed (a QoS 1/2 delivery) or done.
func (g *group) handedOut(p *partition, rec *kgo.Record, owed bool) {
	g.mu.Lock()
	p.next = rec.Offset + 1
	if owed {
		p.owed[rec.Offset] = struct{}{}
	}
	g.mu.Unlock()
}

// owe records offset off of p as owed (or not: its delivery failed, or
// was QoS 0).
func (g *group) owe(p *partition, off int64, owed bool) {
	g.mu.Lock()
	if owed {
		p.owed[off] = struct{}{}
	} else {
		delete(p.owed, off)
	}
	g.mu.Unlock()
}

// owedBy records that member id owes d.
func (g *group) owedBy(id string, d *delivery) {
	g.mu.Lock()
	d.member = id
	g.load[id]++
	g.mu.Unlock()
}

// release takes d off its member's load (it was not queued for it).
func (g *group) release(d *delivery) {
	g.mu.Lock()
	g.releaseLocked(d)
	g.mu.Unlock()
}

// releaseLocked takes d off its member's load; under mu.
func (g *group) releaseLocked(d *delivery) {
	if d.member == "" {
		return
	}
	if g.load[d.member]--; g.load[d.member] <= 0 {
		delete(g.load, d.member)
	}
	delete(g.paused, d.member)
	d.member = ""
}

// acked: d's member acknowledged it.
func (g *group) acked(d *delivery) {
	g.settle(d)
	g.signal()
}

// settle: d needs no more delivery.
func (g *group) settle(d *delivery) {
	g.mu.Lock()
	g.releaseLocked(d)
	if g.parts[tp{d.rec.Topic, d.rec.Partition}] == d.part {
		delete(d.part.owed, d.rec.Offset)
	}
	g.mu.Unlock()
}

// handBack: d's member went (or mochi gave d up) unacknowledged; another
// member gets it.
func (g *group) handBack(d *delivery) {
	g.mu.Lock()
	g.releaseLocked(d)
	if g.parts[tp{d.rec.Topic, d.rec.Partition}] == d.part {
		g.back = append(g.back, d)
		if g.pollCancel != nil {
			g.pollCancel() // the delivery loop takes it now
		}
	}
	g.mu.Unlock()
	g.signal()
}

// pollContext is what the delivery loop waits for records under: ctx,
// ended early when a delivery is handed back. One serves until then (not
// one per poll).
func (g *group) pollContext(ctx context.Context) context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.poll == nil || g.poll.Err() != nil {
		g.poll, g.pollCancel = context.WithCancel(ctx)
	}
	return g.poll
}

// takeBack returns the deliveries handed back, oldest first.
func (g *group) takeBack() []*delivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.back
	g.back = nil
	slices.SortFunc(out, func(a, b *delivery) int {
		if a.rec.Offset < b.rec.Offset {
			return -1
		}
		if a.rec.Offset > b.rec.Offset {
			return 1
		}
		return 0
	})
	return out
}

// committable returns, per partition, the lowest offset still owed (the
// next to hand out when none is), where it moved since the last commit.
func (g *group) committable() map[string]map[int32]kgo.EpochOffset {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]map[int32]kgo.EpochOffset{}
	for k, p := range g.parts {
		if p.next < 0 {
			continue
		}
		at := p.next
		for off := range p.owed {
			at = min(at, off)
		}
		if at == p.committed {
			continue
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.EpochOffset{}
		}
		out[k.topic][k.part] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return out
}

// committed records offsets committed.
func (g *group) committed(offsets map[string]map[int32]kgo.EpochOffset) {
	g.mu.Lock()
	for t, ps := range offsets {
		for part, eo := range ps {
			if p := g.parts[tp{t, part}]; p != nil {
				p.committed = eo.Offset
			}
		}
	}
	g.mu.Unlock()
}

// assign adds partitions Kafka assigned.
func (g *group) assign(parts map[string][]int32) {
	g.mu.Lock()
	for t, ps := range parts {
		for _, p := range ps {
			if g.parts[tp{t, p}] == nil {
				g.parts[tp{t, p}] = &partition{next: -1, committed: -1, owed: map[int64]struct{}{}}
			}
		}
	}
	g.mu.Unlock()
}

// revoke forgets partitions Kafka took away: what they owed is its new
// owner's to deliver (from the commit).
func (g *group) revoke(parts map[string][]int32) {
	g.mu.Lock()
	for t, ps := range parts {
		for _, p := range ps {
			delete(g.parts, tp{t, p})
		}
	}
	kept := g.back[:0]
	for _, d := range g.back {
		if g.parts[tp{d.rec.Topic, d.rec.Partition}] == d.part {
			kept = append(kept, d)
		}
	}
	g.back = kept
	lag := g.lagLocked()
	g.mu.Unlock()
	g.lag.Set(float64(lag))
}

// partitions counts the partitions assigned.
func (g *group) partitions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.parts)
}

// setLag records a partition's records not yet handed out.
func (g *group) setLag(k tp, lag int64) {
	g.mu.Lock()
	if p := g.parts[k]; p != nil {
		p.lag = max(lag, 0)
	}
	sum := g.lagLocked()
	g.mu.Unlock()
	g.lag.Set(float64(sum))
}

func (g *group) lagLocked() int64 {
	var sum int64
	for _, p := range g.parts {
		sum += p.lag
	}
	return sum
}
