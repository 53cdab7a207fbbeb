package probe

import (
	"testing"

	"github.com/ferry-bridge/ferry/probe/stamp"
)

// BenchmarkStreamObserve is the probe's receive-side cost per message
// (parse, join, two histograms): it must stay far below the latencies it
// measures.
func BenchmarkStreamObserve(b *testing.B) {
	const n = 1 << 20
	s := newStream(0, n, 0, true, false, nil)
	p := make([]byte, stamp.Size)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint32(i % n)
		stamp.Put(p, stamp.Stamp{Seq: seq, SentNs: int64(i) * 1000})
		s.observe(p, int64(i)*1000+500_000, int64(i)/1000)
	}
}
