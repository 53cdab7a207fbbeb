package producer

import "time"

// growth keeps each key's order while its topic gains partitions. Kafka
// only adds partitions; the hash partitioner then sends some keys to
// another partition while their older records may still wait in the old
// one (queued, in flight, or retrying). Until every partition has settled
// what it held when the count changed, a record whose key moved is held
// back, in arrival order, and placed on its new partition once its old
// ones are settled; keys that did not move go on at once. Settled means:
// each record the partition held then is acknowledged or failed, and no
// request sent before the change is still unanswered. Held records count
// in held (the loop's memory bound) and fail at their own deadline.
//
// The promise: the records of one key reach Kafka in order across the
// change, as within one partition. Its limit: Ferry learns of new
// partitions when it next reads the topic's metadata (after a produce
// error, or when the topic's state was forgotten after idleAfter); until
// then it keeps writing to the partitions it knows.
type growth struct {
	counts   []int     // partition counts since the growth began, oldest first
	at       time.Time // when the count last changed
	draining []*partQ  // partitions not yet settled
	hold     []*Record // records of moved keys, oldest first
	recheck  bool      // the partitions to wait for changed: look at hold again
}

// grow notes that tq is about to go from its n partitions to more.
func (p *Producer) grow(tq *topicQ, n int, now time.Time) {
	g := tq.grow
	if g == nil {
		g = &growth{}
		tq.grow = g
	}
	g.counts = append(g.counts, n)
	g.at, g.recheck = now, true
	for _, pq := range g.draining {
		pq.draining = false
	}
	g.draining = g.draining[:0]
	for _, pq := range tq.parts {
		pq.olds = append(append(pq.olds[:0], pq.flight...), pq.q...)
		pq.oldsAt = 0
		if len(pq.olds) > 0 || pq.inflight {
			pq.draining = true
			g.draining = append(g.draining, pq)
		}
	}
	p.log.Info("kafka topic gained partitions: keys that move wait for their old partition", "topic", tq.name,
		"from", n, "draining", len(g.draining))
}

// mustWait reports whether a record of key must be held back: its key
// moved away from a partition that is not settled yet.
func (g *growth) mustWait(tq *topicQ, key []byte) bool {
	cur := partitionFor(key, len(tq.parts))
	for _, n := range g.counts {
		if old := partitionFor(key, n); old != cur && tq.parts[old].draining {
			return true
		}
	}
	return false
}

// hold holds r back if its key must wait; it reports whether it did.
func (p *Producer) hold(tq *topicQ, r *Record, now time.Time) bool {
	p.settleGrowth(tq, now)
	g := tq.grow
	if g == nil || !g.mustWait(tq, r.Key) {
		return false
	}
	g.hold = append(g.hold, r)
	p.held++
	return true
}

// settleGrowth notes the partitions that settled and places the held
// records whose keys need not wait any more, in their order; the growth
// ends when nothing is left to wait for.
func (p *Producer) settleGrowth(tq *topicQ, now time.Time) {
	g := tq.grow
	if g == nil {
		return
	}
	kept := g.draining[:0]
	for _, pq := range g.draining {
		if pq.settled(g.at) {
			pq.draining = false
			continue
		}
		kept = append(kept, pq)
	}
	changed := g.recheck || len(kept) < len(g.draining)
	g.recheck = false
	clear(g.draining[len(kept):])
	g.draining = kept
	if changed && len(g.hold) > 0 {
		still := g.hold[:0]
		for _, r := range g.hold {
			if g.mustWait(tq, r.Key) {
				still = append(still, r)
				continue
			}
			p.held--
			p.push(tq.parts[partitionFor(r.Key, len(tq.parts))], r, now)
		}
		clear(g.hold[len(still):])
		g.hold = still
	}
	if len(g.draining) == 0 && len(g.hold) == 0 {
		tq.grow = nil
	}
}

// settled reports whether every record pq held at `at` is acknowledged or
// failed, and no request sent before `at` is unanswered.
func (pq *partQ) settled(at time.Time) bool {
	if pq.inflight && pq.sentAt.Before(at) {
		return false
	}
	// Records settle in queue order but for expiries: trim from the front.
	for pq.oldsAt < len(pq.olds) && pq.olds[pq.oldsAt].finished.Load() {
		pq.olds[pq.oldsAt] = nil
		pq.oldsAt++
	}
	if pq.oldsAt < len(pq.olds) {
		return false
	}
	clear(pq.olds)
	pq.olds, pq.oldsAt = pq.olds[:0], 0
	return true
}
