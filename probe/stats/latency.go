// Package stats joins received probe messages to the sequence space of a run
// and turns them into figures: loss, duplicates, reordering and latency
// histograms (HDR, microsecond units), mergeable across goroutines.
package stats

import (
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram geometry: microseconds from 1 µs to 60 s, 3 significant digits
// (values up to 2.048 ms are exact to the microsecond).
const (
	lowestUs  = 1
	highestUs = 60_000_000
	sigFigs   = 3
)

// Latency is one latency distribution. It is not safe for concurrent use:
// give each goroutine its own and Merge them.
type Latency struct {
	h        *hdrhistogram.Histogram
	negative int64
	overflow int64
}

// NewLatency returns an empty distribution.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(lowestUs, highestUs, sigFigs)}
}

// Record adds one sample given in nanoseconds. Negative samples are recorded
// as 0 and counted (see Negative); samples above 60 s are recorded as 60 s
// and counted (see Overflow). Sub-microsecond parts are truncated.
func (l *Latency) Record(ns int64) {
	us := ns / int64(time.Microsecond)
	switch {
	case ns < 0:
		l.negative++
		us = 0
	case us > highestUs:
		l.overflow++
		us = highestUs
	}
	// Cannot fail: us is within [0, highestUs].
	_ = l.h.RecordValue(us)
}

// Merge adds every sample of o to l.
func (l *Latency) Merge(o *Latency) {
	l.h.Merge(o.h)
	l.negative += o.negative
	l.overflow += o.overflow
}

// Count is the number of samples recorded.
func (l *Latency) Count() int64 { return l.h.TotalCount() }

// Negative is the number of samples that were below zero and recorded as 0.
func (l *Latency) Negative() int64 { return l.negative }

// Overflow is the number of samples above 60 s recorded as 60 s.
func (l *Latency) Overflow() int64 { return l.overflow }

// Quantile returns the q-quantile (0..1) in milliseconds.
func (l *Latency) Quantile(q float64) float64 {
	return usToMs(l.h.ValueAtQuantile(q * 100))
}

// Figures are the summary of a distribution, in milliseconds with
// microsecond precision. The zero value (Count 0) means no samples.
type Figures struct {
	Count                                   int64
	Min, Avg, P50, P90, P95, P99, P999, Max float64
}

// Figures summarises l.
func (l *Latency) Figures() Figures {
	if l.Count() == 0 {
		return Figures{}
	}
	return Figures{
		Count: l.Count(),
		Min:   usToMs(l.h.Min()),
		Avg:   math.Round(l.h.Mean()) / 1000,
		P50:   l.Quantile(0.50),
		P90:   l.Quantile(0.90),
		P95:   l.Quantile(0.95),
		P99:   l.Quantile(0.99),
		P999:  l.Quantile(0.999),
		Max:   usToMs(l.h.Max()),
	}
}

func usToMs(us int64) float64 { return float64(us) / 1000 }
