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
	mu     sync.Mutex
	e2e    *stats.Latency
	app    *stats.Latency // nil when the direction has no append metric
	noApp  int64          // measured records without LogAppendTime
	bridge *stats.Latency // nil unless the stream has a hop (kafka-to-mqtt)
	// hopApp and hopDeliv are the two halves of a split roundtrip (append
	// and delivery); nil unless split.
	hopApp, hopDeliv *stats.Latency
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
	k.app.Record(appendLatencyNs(appendMs, sentNs))
}

// appendLatencyNs is the append metric as the reference test computed it:
// both times in whole milliseconds (LogAppendTime is whole ms on the
// broker's clock; the send time is truncated to its ms), so the figures
// compare with the reference's table. Each sample is a whole number of ms.
func appendLatencyNs(appendMs, sentNs int64) int64 {
	return (appendMs - sentNs/1e6) * 1e6
}

// hop joins an MQTT arrival to the probe's own Kafka receive of the same
// record (kafka-to-mqtt): recv[seq] is the Kafka receive time, 0 until it
// arrives.
type hop struct {
	recv []atomic.Int64
}

// appendTimes holds, per sequence number, the LogAppendTime (Unix ms) of
// the Kafka record of the message (split roundtrip); 0 until the probe's
// Kafka consumer has it.
type appendTimes struct {
	ms []atomic.Int64
}

// get returns the LogAppendTime of seq, or noAppend.
func (a *appendTimes) get(seq uint32) int64 {
	if v := a.ms[seq].Load(); v != 0 {
		return v
	}
	return noAppend
}

// recordSplit adds one delivery of a split roundtrip: append (LogAppendTime
// - send time, whole ms as the append metric) and delivery (receive -
// LogAppendTime).
func (k *sink) recordSplit(sentNs, appendMs, recvNs int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hopApp.Record(appendLatencyNs(appendMs, sentNs))
	k.hopDeliv.Record(deliveryLatencyNs(appendMs, recvNs))
}

// deliveryLatencyNs is the delivery metric: the receive time minus the
// record's LogAppendTime (whole ms, so up to 1 ms too long).
func deliveryLatencyNs(appendMs, recvNs int64) int64 {
	return recvNs - appendMs*1e6
}

// pendingSplit is a delivery that arrived before the probe's Kafka
// consumer saw its record.
type pendingSplit struct {
	seq            uint32
	sentNs, recvNs int64
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
	// hop, when set, gets the bridge metric of each measured arrival;
	// arrivals that came before the probe's Kafka receive wait in
	// pendingHop until finish.
	hop        *hop
	pendingHop []arrival
	// recvAt, when set, is filled with each first arrival's receive time
	// (the Kafka stream of kafka-to-mqtt feeds a hop).
	recvAt *hop
	// split, when set (split roundtrip), gets the append and delivery
	// metrics of each measured arrival; arrivals that came before the
	// probe's Kafka consumer saw their record wait in pendingSplit until
	// finish. delivTL is the run's delivery timeline (append's is appTL).
	split        *appendTimes
	pendingSplit []pendingSplit
	delivTL      *stats.Timeline
	// appendAt, when set, is filled with each first arrival's
	// LogAppendTime (the Kafka stream of a split roundtrip).
	appendAt *appendTimes

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
	st, err := stamp.Parse(payload)
	if err != nil {
		s.mu.Lock()
		s.foreign++
		s.mu.Unlock()
		return
	}
	s.observeStamp(st, recvNs, appendMs)
}

// observeStamp joins one received stamp (observe without the payload: the
// raw engine's acknowledgements).
func (s *stream) observeStamp(st stamp.Stamp, recvNs, appendMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Our stamps were sent before they were received, on the same clock.
	if st.Seq >= s.window.Total || st.SentNs < s.window.FromNs || st.SentNs > recvNs {
		s.foreign++
		return
	}
	v := s.tr.Observe(st.Seq, recvNs)
	if s.recvAt != nil && (v == stats.Measured || v == stats.Warmup) {
		s.recvAt.recv[st.Seq].Store(recvNs)
	}
	if s.appendAt != nil && appendMs > 0 && (v == stats.Measured || v == stats.Warmup) {
		s.appendAt.ms[st.Seq].Store(appendMs)
	}
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
	if s.hop != nil {
		if k := s.hop.recv[st.Seq].Load(); k != 0 {
			s.lat.recordBridge(recvNs - k)
		} else {
			s.pendingHop = append(s.pendingHop, arrival{seq: st.Seq, recvNs: recvNs})
		}
	}
	if s.split != nil {
		if a := s.split.get(st.Seq); a != noAppend {
			s.recordSplit(st.SentNs, a, recvNs)
		} else {
			s.pendingSplit = append(s.pendingSplit, pendingSplit{seq: st.Seq, sentNs: st.SentNs, recvNs: recvNs})
		}
	}
	if s.tl != nil {
		s.tl.Record(recvNs, recvNs-st.SentNs)
	}
	if s.appTL != nil && appendMs != noAppend {
		s.appTL.Record(recvNs, appendLatencyNs(appendMs, st.SentNs))
	}
}

// p99 returns the running e2e p99 in ms (for the progress line).
func (s *stream) p99() float64 {
	s.lat.mu.Lock()
	defer s.lat.mu.Unlock()
	return s.lat.e2e.Quantile(0.99)
}

// recordBridge adds one bridge sample (MQTT receive - Kafka receive).
func (k *sink) recordBridge(ns int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bridge.Record(ns)
}

// resolveHops records the bridge metric of arrivals that came before the
// probe's Kafka receive of their record (negative samples, clamped to 0 and
// counted) and returns how many never had a Kafka receive.
func (s *stream) resolveHops() (missing int64) {
	s.mu.Lock()
	pending := s.pendingHop
	s.pendingHop = nil
	s.mu.Unlock()
	for _, a := range pending {
		if k := s.hop.recv[a.seq].Load(); k != 0 {
			s.lat.recordBridge(a.recvNs - k)
		} else {
			missing++
		}
	}
	return missing
}

// recordSplit adds one measured delivery to the split metrics and their
// timelines.
func (s *stream) recordSplit(sentNs, appendMs, recvNs int64) {
	s.lat.recordSplit(sentNs, appendMs, recvNs)
	if s.appTL != nil {
		s.appTL.Record(recvNs, appendLatencyNs(appendMs, sentNs))
	}
	if s.delivTL != nil {
		s.delivTL.Record(recvNs, deliveryLatencyNs(appendMs, recvNs))
	}
}

// resolveSplit records the split metrics of arrivals that came before the
// probe's Kafka consumer saw their record and returns how many never had
// a LogAppendTime.
func (s *stream) resolveSplit() (missing int64) {
	s.mu.Lock()
	pending := s.pendingSplit
	s.pendingSplit = nil
	s.mu.Unlock()
	for _, p := range pending {
		if a := s.split.get(p.seq); a != noAppend {
			s.recordSplit(p.sentNs, a, p.recvNs)
		} else {
			missing++
		}
	}
	return missing
}
