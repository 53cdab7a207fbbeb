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

// timelineSigFigs is the precision of per-interval histograms: 1% is
// plenty for a plot and keeps one histogram around 20 KB.
const timelineSigFigs = 2

// A timeline starts with intervals of timelineFirstWidth and doubles the
// width (merging neighbours) whenever it would need more than
// timelineMaxBuckets intervals: a 3-second run still has 24 points, a
// 10-minute run 300 of 2 s, and memory stays bounded (about 10 MB). The
// widths 125 ms x 2^k divide a second exactly up to 1 s.
const (
	timelineFirstWidth = 125 * time.Millisecond
	timelineMaxBuckets = 512
)

// Bucket is one interval of a Timeline.
type Bucket struct {
	// Start is the offset of the interval from the timeline's origin, Width
	// its length.
	Start, Width time.Duration
	// Count is the number of samples (arrivals) in the interval.
	Count int64
	// P50 and P99 are latencies in ms; zero when Count is 0.
	P50, P99 float64
}

// Timeline buckets latency samples by the time of their arrival, for
// throughput and p50/p99 over time. It is safe for concurrent use.
type Timeline struct {
	mu      sync.Mutex
	origin  int64
	width   time.Duration
	buckets []*hdrhistogram.Histogram
}

// maxTimelineSpan bounds a timeline (about a day): later samples are dropped.
const maxTimelineSpan = 24 * time.Hour

// NewTimeline returns a timeline whose time 0 is originNs (Unix ns).
func NewTimeline(originNs int64) *Timeline {
	return &Timeline{origin: originNs, width: timelineFirstWidth}
}

// Record adds a sample of latNs nanoseconds that arrived at recvNs (Unix
// ns). Arrivals before the origin count in the first interval; beyond a day
// they are dropped.
func (t *Timeline) Record(recvNs, latNs int64) {
	off := time.Duration(max(0, recvNs-t.origin))
	if off >= maxTimelineSpan {
		return
	}
	us := min(max(latNs/int64(time.Microsecond), 0), highestUs)
	t.mu.Lock()
	defer t.mu.Unlock()
	i := int(off / t.width)
	for i >= timelineMaxBuckets {
		t.coarsen()
		i = int(off / t.width)
	}
	for len(t.buckets) <= i {
		t.buckets = append(t.buckets, nil)
	}
	h := t.buckets[i]
	if h == nil {
		h = hdrhistogram.New(lowestUs, highestUs, timelineSigFigs)
		t.buckets[i] = h
	}
	_ = h.RecordValue(us) // within range by construction
}

// coarsen doubles the width, merging each pair of intervals.
func (t *Timeline) coarsen() {
	merged := make([]*hdrhistogram.Histogram, (len(t.buckets)+1)/2)
	for i, h := range t.buckets {
		switch {
		case h == nil:
		case merged[i/2] == nil:
			merged[i/2] = h
		default:
			merged[i/2].Merge(h)
		}
	}
	t.buckets, t.width = merged, 2*t.width
}

// Buckets returns one entry per interval from the origin to the last
// arrival (the last one is partial: the run ended inside it).
func (t *Timeline) Buckets() []Bucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Bucket, len(t.buckets))
	for i, h := range t.buckets {
		out[i].Start, out[i].Width = time.Duration(i)*t.width, t.width
		if h == nil {
			continue
		}
		out[i].Count = h.TotalCount()
		out[i].P50 = usToMs(h.ValueAtQuantile(50))
		out[i].P99 = usToMs(h.ValueAtQuantile(99))
	}
	return out
}

// PeakPerSecond is the largest number of arrivals in one whole second of
// the run (the last, partial second is excluded unless it is the only
// one). Once intervals are wider than a second (runs longer than about 8.5
// minutes), it is the busiest interval's count per second.
func (t *Timeline) PeakPerSecond() int64 {
	bs := t.Buckets()
	if len(bs) == 0 {
		return 0
	}
	if w := bs[0].Width; w > time.Second {
		if len(bs) > 1 {
			bs = bs[:len(bs)-1]
		}
		var peak int64
		for _, b := range bs {
			peak = max(peak, b.Count)
		}
		return int64(float64(peak) / w.Seconds())
	}
	var secs []int64
	for _, b := range bs {
		s := int(b.Start / time.Second)
		for len(secs) <= s {
			secs = append(secs, 0)
		}
		secs[s] += b.Count
	}
	if len(secs) > 1 {
		secs = secs[:len(secs)-1]
	}
	var peak int64
	for _, c := range secs {
		peak = max(peak, c)
	}
	return peak
}
