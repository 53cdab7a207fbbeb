package probe

import (
	"sync"
	"sync/atomic"

	"github.com/ferry-bridge/ferry/probe/stamp"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// noAppend marks an arrival without a LogAppendTime.
const noAppend = -1

// arrival is one received message, kept for the raw file.
type arrival struct {
	seq      uint32
	appendMs int64
	recvNs   int64
}

// stream is one receiving goroutine's view of the run: a Kafka consumer or
// an MQTT subscriber. Its own histograms are merged with the others' at the
// end. The mutex is uncontended except when the progress line reads it.
type stream struct {
	mu      sync.Mutex
	window  stamp.Window
	tr      *stats.Tracker
	e2e     *stats.Latency
	app     *stats.Latency // nil when the direction has no append metric
	noApp   int64          // measured records without LogAppendTime
	foreign int64
	raw     []arrival // nil unless raw lines are kept
	// tl and appTL, when set, are the run's shared per-second timelines of
	// e2e and append latency.
	tl, appTL *stats.Timeline
	keepRaw   bool

	total    int64
	unique   int64
	received *atomic.Int64 // shared progress counter
	done     chan struct{}
}

func newStream(warmup, count uint32, fromNs int64, withAppend, keepRaw bool, received *atomic.Int64) *stream {
	s := &stream{
		window:   stamp.Window{Total: warmup + count, FromNs: fromNs},
		tr:       stats.NewTracker(warmup, count),
		e2e:      stats.NewLatency(),
		keepRaw:  keepRaw,
		total:    int64(warmup) + int64(count),
		received: received,
		done:     make(chan struct{}),
	}
	if withAppend {
		s.app = stats.NewLatency()
	}
	return s
}

// observe joins one received payload. appendMs is the record's
// LogAppendTime in Unix ms, or noAppend.
func (s *stream) observe(payload []byte, recvNs, appendMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Our stamps were sent before they were received, on the same clock.
	w := s.window
	w.ToNs = recvNs
	st, err := w.Check(payload)
	if err != nil {
		s.foreign++
		return
	}
	v := s.tr.Observe(st.Seq, recvNs)
	if v == stats.Measured || v == stats.Warmup {
		s.unique++
		if s.received != nil {
			s.received.Add(1)
		}
		if s.unique == s.total {
			close(s.done)
		}
	}
	if s.keepRaw {
		s.raw = append(s.raw, arrival{seq: st.Seq, appendMs: appendMs, recvNs: recvNs})
	}
	if v != stats.Measured {
		return
	}
	s.e2e.Record(recvNs - st.SentNs)
	if s.tl != nil {
		s.tl.Record(recvNs, recvNs-st.SentNs)
	}
	if s.app != nil {
		if appendMs == noAppend {
			s.noApp++
		} else {
			// LogAppendTime is whole ms (the broker's clock, truncated);
			// the send time is ns. The difference is a lower bound of the
			// true append latency by up to 1 ms and can be negative:
			// Latency.Record clamps negatives to 0 and counts them.
			s.app.Record(appendMs*1e6 - st.SentNs)
			if s.appTL != nil {
				s.appTL.Record(recvNs, appendMs*1e6-st.SentNs)
			}
		}
	}
}

// p99 returns the running e2e p99 in ms (for the progress line).
func (s *stream) p99() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e2e.Quantile(0.99)
}
