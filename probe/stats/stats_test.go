package stats

import (
	"math/rand/v2"
	"testing"
	"time"
)

func observeAll(t *Tracker, seqs []uint32) []Verdict {
	v := make([]Verdict, len(seqs))
	for i, s := range seqs {
		v[i] = t.Observe(s, int64(1000+i))
	}
	return v
}

func TestTrackerKnownStreams(t *testing.T) {
	tests := []struct {
		name          string
		warmup, count uint32
		arrivals      []uint32
		want          Counts
	}{
		{
			name: "in order, complete", count: 5,
			arrivals: []uint32{0, 1, 2, 3, 4},
			want:     Counts{Expected: 5, Received: 5, FirstRecvNs: 1000, LastRecvNs: 1004},
		},
		{
			name: "lost 1 and 3", count: 5,
			arrivals: []uint32{0, 2, 4},
			want:     Counts{Expected: 5, Received: 3, FirstRecvNs: 1000, LastRecvNs: 1002},
		},
		{
			name: "duplicates", count: 3,
			arrivals: []uint32{0, 1, 1, 2, 1, 0},
			want:     Counts{Expected: 3, Received: 3, Duplicated: 3, FirstRecvNs: 1000, LastRecvNs: 1003},
		},
		{
			// 3 and 1 arrive after a higher sequence; 2 arrives after 4.
			name: "reordered", count: 5,
			arrivals: []uint32{0, 4, 3, 1, 2},
			want:     Counts{Expected: 5, Received: 5, Reordered: 3, FirstRecvNs: 1000, LastRecvNs: 1004},
		},
		{
			// Reordered counts first arrivals only: the late duplicate of 1
			// is a duplicate, not a reorder.
			name: "dup of low seq is not a reorder", count: 3,
			arrivals: []uint32{0, 1, 2, 1},
			want:     Counts{Expected: 3, Received: 3, Duplicated: 1, FirstRecvNs: 1000, LastRecvNs: 1002},
		},
		{
			// Warm-up 0..1 excluded: its loss, duplicates and lateness are
			// counted apart.
			name: "warm-up excluded", warmup: 2, count: 3,
			arrivals: []uint32{1, 1, 3, 0, 2, 4},
			want: Counts{Expected: 3, Received: 3, Reordered: 1, WarmupExpected: 2, WarmupReceived: 2,
				FirstRecvNs: 1002, LastRecvNs: 1005},
		},
		{
			name: "warm-up lost", warmup: 2, count: 1,
			arrivals: []uint32{2},
			want:     Counts{Expected: 1, Received: 1, WarmupExpected: 2, FirstRecvNs: 1000, LastRecvNs: 1000},
		},
		{
			name: "nothing arrived", count: 4,
			want: Counts{Expected: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.warmup, tc.count)
			observeAll(tr, tc.arrivals)
			if got := tr.Counts(); got != tc.want {
				t.Fatalf("counts:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTrackerVerdicts(t *testing.T) {
	tr := NewTracker(1, 2)
	got := observeAll(tr, []uint32{0, 1, 1, 3, 2, 0})
	want := []Verdict{Warmup, Measured, Duplicate, OutOfRange, Measured, Duplicate}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("arrival %d: verdict %d, want %d", i, got[i], want[i])
		}
	}
	if !tr.Seen(2) || tr.Seen(3) {
		t.Errorf("Seen: 2=%v 3=%v", tr.Seen(2), tr.Seen(3))
	}
}

// TestTrackerShuffled checks the counters against a brute-force model on a
// random stream with losses, duplicates and shuffling.
func TestTrackerShuffled(t *testing.T) {
	const count = 10_000
	rng := rand.New(rand.NewPCG(1, 2))
	var arrivals []uint32
	for i := uint32(0); i < count; i++ {
		switch r := rng.IntN(100); {
		case r < 3: // lost
		case r < 6:
			arrivals = append(arrivals, i, i)
		default:
			arrivals = append(arrivals, i)
		}
	}
	for k := 0; k < 500; k++ { // local swaps
		i := rng.IntN(len(arrivals) - 1)
		arrivals[i], arrivals[i+1] = arrivals[i+1], arrivals[i]
	}
	var want Counts
	want.Expected = count
	seen := map[uint32]bool{}
	max := int64(-1)
	for _, s := range arrivals {
		if seen[s] {
			want.Duplicated++
			continue
		}
		seen[s] = true
		if int64(s) < max {
			want.Reordered++
		}
		if int64(s) > max {
			max = int64(s)
		}
		want.Received++
	}
	tr := NewTracker(0, count)
	observeAll(tr, arrivals)
	got := tr.Counts()
	got.FirstRecvNs, got.LastRecvNs = 0, 0
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got.Lost() == 0 || got.Duplicated == 0 || got.Reordered == 0 {
		t.Fatalf("stream did not exercise loss/dup/reorder: %+v", got)
	}
}

func TestCountsAdd(t *testing.T) {
	a := Counts{Expected: 5, Received: 4, Duplicated: 1, Reordered: 2, WarmupExpected: 1, WarmupReceived: 1, FirstRecvNs: 50, LastRecvNs: 90}
	b := Counts{Expected: 5, Received: 5, Reordered: 1, WarmupExpected: 1, FirstRecvNs: 40, LastRecvNs: 80}
	a.Add(b)
	want := Counts{Expected: 10, Received: 9, Duplicated: 1, Reordered: 3, WarmupExpected: 2, WarmupReceived: 1, FirstRecvNs: 40, LastRecvNs: 90}
	if a != want {
		t.Fatalf("got %+v want %+v", a, want)
	}
	if a.Lost() != 1 || a.WarmupLost() != 1 {
		t.Fatalf("Lost %d WarmupLost %d", a.Lost(), a.WarmupLost())
	}
	var empty Counts
	empty.Add(Counts{Expected: 1})
	if empty.FirstRecvNs != 0 {
		t.Fatalf("FirstRecvNs from a stream that received nothing: %d", empty.FirstRecvNs)
	}
}

func TestLatencyFigures(t *testing.T) {
	l := NewLatency()
	// 1..1000 µs: p50 = 0.5 ms, p90 = 0.9 ms, p99 = 0.99 ms, exact below
	// 2.048 ms at 3 significant digits.
	for us := int64(1); us <= 1000; us++ {
		l.Record(us * int64(time.Microsecond))
	}
	f := l.Figures()
	want := Figures{Count: 1000, Min: 0.001, Avg: 0.5, P50: 0.5, P90: 0.9, P95: 0.95, P99: 0.99, P999: 0.999, Max: 1.0}
	// Avg of 1..1000 is 500.5 µs, rounded to the µs: 0.5 or 0.501.
	if f.Avg < 0.5 || f.Avg > 0.501 {
		t.Errorf("Avg %v", f.Avg)
	}
	f.Avg = want.Avg
	if f != want {
		t.Fatalf("figures:\n got %+v\nwant %+v", f, want)
	}
	if (NewLatency().Figures() != Figures{}) {
		t.Fatal("empty histogram has figures")
	}
}

func TestLatencyClamps(t *testing.T) {
	l := NewLatency()
	l.Record(-300 * int64(time.Microsecond))
	l.Record(-1)
	l.Record(500) // 0.5 µs truncates to 0
	l.Record(int64(2 * time.Minute))
	if l.Negative() != 2 || l.Overflow() != 1 || l.Count() != 4 {
		t.Fatalf("negative %d overflow %d count %d", l.Negative(), l.Overflow(), l.Count())
	}
	f := l.Figures()
	if f.Min != 0 || f.Max < 59_990 || f.Max > 60_100 {
		t.Fatalf("min %v max %v", f.Min, f.Max)
	}
}

// TestLatencyMerge checks that per-goroutine histograms merge into the same
// distribution as one histogram fed everything.
func TestLatencyMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all := NewLatency()
	parts := []*Latency{NewLatency(), NewLatency(), NewLatency()}
	for i := 0; i < 30_000; i++ {
		v := rng.Int64N(int64(50*time.Millisecond)) - int64(time.Millisecond)
		all.Record(v)
		parts[i%3].Record(v)
	}
	merged := NewLatency()
	for _, p := range parts {
		merged.Merge(p)
	}
	if merged.Figures() != all.Figures() {
		t.Fatalf("merged %+v\n   all %+v", merged.Figures(), all.Figures())
	}
	if merged.Negative() != all.Negative() || merged.Negative() == 0 {
		t.Fatalf("negative: merged %d all %d", merged.Negative(), all.Negative())
	}
}

func TestCDF(t *testing.T) {
	l := NewLatency()
	if l.CDF() != nil {
		t.Fatal("CDF of an empty distribution")
	}
	for i := 1; i <= 100; i++ {
		l.Record(int64(i) * 1e6) // 1..100 ms
	}
	cdf := l.CDF()
	if len(cdf) < 10 {
		t.Fatalf("cdf %v", cdf)
	}
	for i := 1; i < len(cdf); i++ {
		if cdf[i].Ms <= cdf[i-1].Ms || cdf[i].Fraction < cdf[i-1].Fraction {
			t.Fatalf("not monotonic at %d: %v", i, cdf)
		}
	}
	if last := cdf[len(cdf)-1]; last.Fraction != 1 || last.Ms < 99.9 || last.Ms > 100.1 {
		t.Fatalf("last point %+v", last)
	}
}

func TestTimeline(t *testing.T) {
	const origin = int64(1e18)
	tl := NewTimeline(origin)
	// Second 0: 10 samples of 1 ms; second 2: 3 samples of 50 ms; second 3:
	// one sample (partial last second).
	for range 10 {
		tl.Record(origin+int64(500*time.Millisecond), 1e6)
	}
	for range 3 {
		tl.Record(origin+int64(2500*time.Millisecond), 50e6)
	}
	tl.Record(origin+int64(3100*time.Millisecond), 7e6)
	bs := tl.Buckets()
	at := func(d time.Duration) Bucket { return bs[int(d/timelineFirstWidth)] }
	if len(bs) != 25 || at(500*time.Millisecond).Count != 10 || at(1500*time.Millisecond).Count != 0 ||
		at(2500*time.Millisecond).Count != 3 || at(3100*time.Millisecond).Count != 1 {
		t.Fatalf("buckets %+v", bs)
	}
	if b := at(500 * time.Millisecond); b.P50 < 0.99 || b.P50 > 1.01 {
		t.Fatalf("bucket %+v", b)
	}
	if b := at(2500 * time.Millisecond); b.P99 < 49.5 || b.P99 > 50.5 || b.Start != 2500*time.Millisecond || b.Width != timelineFirstWidth {
		t.Fatalf("bucket %+v", b)
	}
	if p := tl.PeakPerSecond(); p != 10 {
		t.Fatalf("peak %d", p)
	}
}

// TestTimelineFitsTheRun: a short run gets enough points to draw (the
// timeline had one per second: a 3-second run showed 3-4 points), and a
// long one stays bounded, with widths that double and counts kept.
func TestTimelineFitsTheRun(t *testing.T) {
	const origin = int64(1e18)
	for _, tc := range []struct {
		run        time.Duration
		minBuckets int
		width      time.Duration
	}{
		{3 * time.Second, 20, timelineFirstWidth},
		{10 * time.Minute, 256, 2 * time.Second},
	} {
		tl := NewTimeline(origin)
		var n int64
		for off := time.Duration(0); off < tc.run; off += 10 * time.Millisecond {
			tl.Record(origin+int64(off), 1e6)
			n++
		}
		bs := tl.Buckets()
		var sum int64
		for _, b := range bs {
			sum += b.Count
		}
		if len(bs) < tc.minBuckets || len(bs) > timelineMaxBuckets || bs[0].Width != tc.width || sum != n {
			t.Errorf("%v run: %d buckets of %v holding %d of %d samples; want >= %d of %v", tc.run, len(bs), bs[0].Width, sum, n, tc.minBuckets, tc.width)
		}
		if p := tl.PeakPerSecond(); p != 100 {
			t.Errorf("%v run: peak %d/s, want 100", tc.run, p)
		}
	}
}

// TestReorderedPerKey: with OrderBy, only a sequence lower than an earlier
// one of the same key (publisher and topic) is reordered.
func TestReorderedPerKey(t *testing.T) {
	const publishers, topics = 2, 2
	key := func(seq uint32) int { return int(seq%publishers*topics + seq/publishers%topics) }
	for _, tc := range []struct {
		name  string
		order []uint32
		want  int64
	}{
		// Keys: 0->0, 1->2, 2->1, 3->3, 4->0, 5->2, 6->1, 7->3.
		{"keys interleaved, each in order", []uint32{1, 3, 5, 7, 0, 2, 4, 6}, 0},
		{"one swap inside key 0", []uint32{1, 3, 5, 7, 4, 2, 0, 6}, 1},
		{"same publisher, other topic may overtake", []uint32{2, 0, 6, 4, 1, 3, 5, 7}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(0, 8)
			tr.OrderBy(publishers*topics, key)
			for i, seq := range tc.order {
				tr.Observe(seq, int64(i+1))
			}
			if got := tr.Counts().Reordered; got != tc.want {
				t.Fatalf("reordered %d, want %d", got, tc.want)
			}
		})
	}
}
