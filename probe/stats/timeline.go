package stats

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// CDFPoint is one point of a cumulative latency distribution: Fraction of
// the samples are at most Ms milliseconds.
type CDFPoint struct {
	Ms       float64
	Fraction float64
}

// CDF returns the cumulative distribution of l, ordered by latency (empty
// when l has no samples).
func (l *Latency) CDF() []CDFPoint {
	if l.Count() == 0 {
		return nil
	}
	total := float64(l.Count())
	var out []CDFPoint
	var cum int64
	for _, b := range l.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		cum += b.Count
		out = append(out, CDFPoint{Ms: usToMs(b.From), Fraction: float64(cum) / total})
	}
	return out
}

// timelineSigFigs is the precision of per-second histograms: 1% is plenty
// for a plot and keeps a second's histogram around 20 KB.
const timelineSigFigs = 2

// Second is one second of a Timeline.
type Second struct {
	// Start is the offset of the second from the timeline's origin.
	Start time.Duration
	// Count is the number of samples (arrivals) in the second.
	Count int64
	// P50 and P99 are latencies in ms; zero when Count is 0.
	P50, P99 float64
}

// Timeline buckets latency samples by the second of their arrival, for
// throughput and p50/p99 over time. It is safe for concurrent use.
type Timeline struct {
	mu     sync.Mutex
	origin int64
	secs   []*hdrhistogram.Histogram
}

// maxTimelineSeconds bounds a timeline's memory (about a day).
const maxTimelineSeconds = 86400

// NewTimeline returns a timeline whose second 0 starts at originNs (Unix
// ns).
func NewTimeline(originNs int64) *Timeline { return &Timeline{origin: originNs} }

// Record adds a sample of latNs nanoseconds that arrived at recvNs (Unix
// ns). Arrivals before the origin count in second 0; beyond a day they are
// dropped.
func (t *Timeline) Record(recvNs, latNs int64) {
	sec := max(0, (recvNs-t.origin)/int64(time.Second))
	if sec >= maxTimelineSeconds {
		return
	}
	us := min(max(latNs/int64(time.Microsecond), 0), highestUs)
	t.mu.Lock()
	defer t.mu.Unlock()
	for int64(len(t.secs)) <= sec {
		t.secs = append(t.secs, nil)
	}
	h := t.secs[sec]
	if h == nil {
		h = hdrhistogram.New(lowestUs, highestUs, timelineSigFigs)
		t.secs[sec] = h
	}
	_ = h.RecordValue(us) // within range by construction
}

// Seconds returns one entry per second from the origin to the last arrival.
func (t *Timeline) Seconds() []Second {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Second, len(t.secs))
	for i, h := range t.secs {
		out[i].Start = time.Duration(i) * time.Second
		if h == nil {
			continue
		}
		out[i].Count = h.TotalCount()
		out[i].P50 = usToMs(h.ValueAtQuantile(50))
		out[i].P99 = usToMs(h.ValueAtQuantile(99))
	}
	return out
}

// PeakPerSecond is the largest Count of any full second (the last,
// partial second is excluded unless it is the only one).
func (t *Timeline) PeakPerSecond() int64 {
	secs := t.Seconds()
	if len(secs) > 1 {
		secs = secs[:len(secs)-1]
	}
	var peak int64
	for _, s := range secs {
		peak = max(peak, s.Count)
	}
	return peak
}
