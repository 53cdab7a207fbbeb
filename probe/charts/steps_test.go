package charts

import (
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/probe/stats"
)

// TestCDFQuantileOnTheCurve: whole-ms data (0 and 1 ms) is drawn as a
// step, and the p50 dot lies on the curve. The line joined the points
// with a slope, so at p50 = 1 ms the curve was at 0.6, not 0.5, and zeros
// sat at 0.001 ms.
func TestCDFQuantileOnTheCurve(t *testing.T) {
	pts := []stats.CDFPoint{{Ms: 0, Fraction: 0.2}, {Ms: 1, Fraction: 0.6}, {Ms: 2, Fraction: 0.95}, {Ms: 7, Fraction: 1}}
	xys := cdfSteps(pts, 0)
	for _, q := range []float64{0.5, 0.99} {
		x := quantileOf(pts, q)
		on := false
		for i := 1; i < len(xys); i++ {
			a, b := xys[i-1], xys[i]
			if a.X == x && b.X == x && a.Y <= q && q <= b.Y {
				on = true
			}
		}
		if !on {
			t.Errorf("p%g dot (%g ms, %g) is not on the drawn curve %v", q*100, x, q, xys)
		}
	}
	for i := 1; i < len(xys); i++ {
		if xys[i].X != xys[i-1].X && xys[i].Y != xys[i-1].Y {
			t.Fatalf("segment %v -> %v is a slope, not a step", xys[i-1], xys[i])
		}
	}
	if xys[0].X != 0 || xys[0].Y != 0 {
		t.Errorf("zeros drawn at %v, want at 0 from 0", xys[0])
	}
}

// TestTimelineLastIntervalAndRoom: the last, partial interval is not drawn
// as a drop in throughput, and the rate is per second whatever the width.
func TestTimelineLastIntervalAndRoom(t *testing.T) {
	w := 125 * time.Millisecond
	bs := []stats.Bucket{
		{Start: 0, Width: w, Count: 125, P50: 1, P99: 2},
		{Start: w, Width: w, Count: 125, P50: 1, P99: 3},
		{Start: 2 * w, Width: w, Count: 3, P50: 1, P99: 2},
	}
	p50, p99, rate := timelineSeries(bs)
	if len(p50) != 3 || len(p99) != 3 || len(rate) != 2 {
		t.Fatalf("p50 %v p99 %v rate %v", p50, p99, rate)
	}
	if rate[0].Y != 1000 || rate[1].Y != 1000 {
		t.Fatalf("rate %v, want 1000 msg/s", rate)
	}
}

func TestPlural(t *testing.T) {
	if got := plural(1, "client") + ", " + plural(4, "client") + ", " + plural(0, "subscriber"); got != "1 client, 4 clients, 0 subscribers" {
		t.Fatal(got)
	}
}

// TestClampedShareNoted: the share of negative samples drawn at the axis
// edge is said on the plot (a flat line of ~21% had no note).
func TestClampedShareNoted(t *testing.T) {
	if got := clampedNote(0.213, false); got != "21.3% of the samples were < 0 (clocks), counted as 0: drawn at the left edge, 0.001 ms" {
		t.Fatalf("note %q", got)
	}
	if got := clampedNote(0, false); got != "" {
		t.Fatalf("note without clamped samples: %q", got)
	}
}
