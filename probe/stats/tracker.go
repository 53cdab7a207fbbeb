package stats

// Verdict says what an arrival was.
type Verdict int

// Verdicts returned by Tracker.Observe.
const (
	// Measured is the first arrival of a message after the warm-up: record
	// its latency.
	Measured Verdict = iota
	// Warmup is the first arrival of a warm-up message: excluded from the
	// figures.
	Warmup
	// Duplicate is a second or later arrival of a message.
	Duplicate
	// OutOfRange is a sequence beyond the run; callers filter these with
	// stamp.Window first, so it signals a bug or a foreign message.
	OutOfRange
)

// Counts are the delivery figures of one or more receiving streams. Only
// measured (post-warm-up) messages are counted, except in the Warmup*
// fields.
type Counts struct {
	// Expected is the number of measured messages the streams should have
	// received.
	Expected int64
	// Received is the number of distinct measured messages received.
	Received int64
	// Duplicated is the number of extra arrivals of measured messages.
	Duplicated int64
	// Reordered is the number of first arrivals whose sequence was lower
	// than the highest sequence that stream had already received from the
	// same order key (publisher and topic, see Tracker.OrderBy): MQTT
	// promises order per publisher and topic only.
	Reordered int64
	// WarmupExpected and WarmupReceived count the warm-up messages.
	WarmupExpected, WarmupReceived int64
	// FirstRecvNs and LastRecvNs bound the first arrivals of measured
	// messages (Unix ns; 0 when none).
	FirstRecvNs, LastRecvNs int64
}

// Lost is the number of measured messages never received.
func (c Counts) Lost() int64 { return c.Expected - c.Received }

// WarmupLost is the number of warm-up messages never received.
func (c Counts) WarmupLost() int64 { return c.WarmupExpected - c.WarmupReceived }

// Add accumulates o into c (streams of the same run).
func (c *Counts) Add(o Counts) {
	c.Expected += o.Expected
	c.Received += o.Received
	c.Duplicated += o.Duplicated
	c.Reordered += o.Reordered
	c.WarmupExpected += o.WarmupExpected
	c.WarmupReceived += o.WarmupReceived
	if o.FirstRecvNs != 0 && (c.FirstRecvNs == 0 || o.FirstRecvNs < c.FirstRecvNs) {
		c.FirstRecvNs = o.FirstRecvNs
	}
	if o.LastRecvNs > c.LastRecvNs {
		c.LastRecvNs = o.LastRecvNs
	}
}

// Tracker joins the arrivals of one receiving stream (one consumer, one
// subscriber) to the run's sequence space [0, warmup+count). Sequences below
// warmup are the warm-up. It is not safe for concurrent use.
type Tracker struct {
	warmup, total uint32
	seen          []uint64
	max           []int64 // highest sequence seen, per order key
	key           func(seq uint32) int
	c             Counts
}

// OrderBy makes reordering count per order key: key(seq) in [0, keys) names
// the stream a sequence belongs to (its publisher and topic). Sequences of
// different keys may interleave freely. Without OrderBy there is one key.
// Call it before the first Observe.
func (t *Tracker) OrderBy(keys int, key func(seq uint32) int) {
	t.max = make([]int64, keys)
	for i := range t.max {
		t.max[i] = -1
	}
	t.key = key
}

// NewTracker returns a tracker for a run of warmup + count messages.
func NewTracker(warmup, count uint32) *Tracker {
	total := warmup + count
	return &Tracker{
		warmup: warmup,
		total:  total,
		seen:   make([]uint64, (uint64(total)+63)/64),
		max:    []int64{-1},
		c:      Counts{Expected: int64(count), WarmupExpected: int64(warmup)},
	}
}

// Observe records the arrival of seq at recvNs (Unix ns) and says what it
// was.
func (t *Tracker) Observe(seq uint32, recvNs int64) Verdict {
	if seq >= t.total {
		return OutOfRange
	}
	word, bit := seq/64, uint64(1)<<(seq%64)
	measured := seq >= t.warmup
	if t.seen[word]&bit != 0 {
		if measured {
			t.c.Duplicated++
		}
		return Duplicate
	}
	t.seen[word] |= bit
	k := 0
	if t.key != nil {
		k = t.key(seq)
	}
	reordered := int64(seq) < t.max[k]
	if int64(seq) > t.max[k] {
		t.max[k] = int64(seq)
	}
	if !measured {
		t.c.WarmupReceived++
		return Warmup
	}
	if reordered {
		t.c.Reordered++
	}
	t.c.Received++
	if t.c.FirstRecvNs == 0 {
		t.c.FirstRecvNs = recvNs
	}
	if recvNs > t.c.LastRecvNs {
		t.c.LastRecvNs = recvNs
	}
	return Measured
}

// Seen reports whether seq has arrived at least once.
func (t *Tracker) Seen(seq uint32) bool {
	return seq < t.total && t.seen[seq/64]&(uint64(1)<<(seq%64)) != 0
}

// Counts returns the figures so far.
func (t *Tracker) Counts() Counts { return t.c }
