package bridge

import "sync"

// reverseProgress is how far this instance's reverse path has handed out
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
type reverseProgress struct {
	serves func(kafkaTopic string) bool // among reverse.topics

	mu   sync.RWMutex
	next map[tp]int64 // the offset after the last record handed out
}

func newReverseProgress(serves func(string) bool) *reverseProgress {
	return &reverseProgress{serves: serves, next: map[tp]int64{}}
}

// handled records that the reverse path has handed out k's records before
// next (delivered to the subscribers it found, or skipped).
func (p *reverseProgress) handled(k tp, next int64) {
	p.mu.Lock()
	if next > p.next[k] {
		p.next[k] = next
	}
	p.mu.Unlock()
}

// limit returns the offset a position of k may not pass: applies is false
// when the reverse path does not consume k; known is false when it has
// handed out nothing of k yet.
func (p *reverseProgress) limit(k tp) (next int64, applies, known bool) {
	if p == nil || !p.serves(k.topic) {
		return 0, false, false
	}
	p.mu.RLock()
	next, known = p.next[k]
	p.mu.RUnlock()
	return next, true, known
}
