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

// sink holds latency histograms. Each stream has its own, except in large
// fan-outs where streams share a bounded number of sinks (an HDR histogram
// is about 128 KB: 10,000 of them would not fit).
type sink struct {
	mu    sync.Mutex
	e2e   *stats.Latency
	app   *stats.Latency // nil when the direction has no append metric
	noApp int64          // measured records without LogAppendTime
}

func newSink(withAppend bool) *sink {
	k := &sink{e2e: stats.NewLatency()}
	if withAppend {
		k.app = stats.NewLatency()
	}
	return k
}

// record adds one measured message. appendMs is noAppend when the record
// has no LogAppendTime.
func (k *sink) record(latNs, appendMs, sentNs int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.e2e.Record(latNs)
	if k.app == nil {
		return
	}
	if appendMs == noAppend {
		k.noApp++
		return
	}
	// LogAppendTime is whole ms (the broker's clock, truncated); the send
	// time is ns. The difference is a lower bound of the true append
	// latency by up to 1 ms and can be negative: Latency.Record clamps
	// negatives to 0 and counts them.
	k.app.Record(appendMs*1e6 - sentNs)
}

// stream is one receiving goroutine's view of the run: a Kafka consumer or
// an MQTT subscriber. Its histograms (its sink) are merged with the others'
// at the end. The mutexes are uncontended except when the progress line
// reads them or when streams share a sink.
type stream struct {
	mu      sync.Mutex
	window  stamp.Window
	tr      *stats.Tracker
	lat     *sink
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
		lat:      newSink(withAppend),
		keepRaw:  keepRaw,
		total:    int64(warmup) + int64(count),
		received: received,
		done:     make(chan struct{}),
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
	s.lat.record(recvNs-st.SentNs, appendMs, st.SentNs)
	if s.tl != nil {
		s.tl.Record(recvNs, recvNs-st.SentNs)
	}
	if s.appTL != nil && appendMs != noAppend {
		s.appTL.Record(recvNs, appendMs*1e6-st.SentNs)
	}
}

// p99 returns the running e2e p99 in ms (for the progress line).
func (s *stream) p99() float64 {
	s.lat.mu.Lock()
	defer s.lat.mu.Unlock()
	return s.lat.e2e.Quantile(0.99)
}
