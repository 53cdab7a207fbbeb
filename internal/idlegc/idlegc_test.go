package idlegc

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestDue(t *testing.T) {
	c := DefaultConfig()
	now := time.Now()
	long := now.Add(-time.Minute)
	quiet := Sample{Allocs: 1 << 30, Live: 10 << 20, Heap: 60 << 20} // 50 MiB beyond 10 live
	for _, tc := range []struct {
		name      string
		prev, cur Sample
		last      time.Time
		want      bool
	}{
		{"quiet after a burst", Sample{Allocs: quiet.Allocs - 1<<20}, quiet, long, true},
		{"first look ever", Sample{Allocs: quiet.Allocs - 1<<20}, quiet, time.Time{}, true},
		{"still allocating", Sample{Allocs: quiet.Allocs - 30<<20}, quiet, long, false},
		{"allocating a little", Sample{Allocs: quiet.Allocs - 20<<20}, quiet, long, true},
		{"released a moment ago", Sample{Allocs: quiet.Allocs}, quiet, now.Add(-10 * time.Second), false},
		{"little excess", Sample{Allocs: 0}, Sample{Allocs: 1 << 20, Live: 10 << 20, Heap: 20 << 20}, long, false},
		{"excess below the live heap", Sample{Allocs: 0}, Sample{Allocs: 1 << 20, Live: 100 << 20, Heap: 180 << 20}, long, false},
		{"heap below live (between readings)", Sample{}, Sample{Live: 10 << 20, Heap: 5 << 20}, long, false},
	} {
		if got := c.Due(tc.prev, tc.cur, tc.last, now); got != tc.want {
			t.Errorf("%s: Due = %v, want %v (excess %d)", tc.name, got, tc.want, tc.cur.Excess())
		}
	}
}

// sink keeps each allocation of the burst from being optimised away.
var sink []byte

// TestReleasesAfterABurst: garbage left by a burst is returned to the
// system within a few looks once the process is quiet. The collector is
// off during the burst, as a high runtime.gc_percent keeps it from running
// for a long time.
func TestReleasesAfterABurst(t *testing.T) {
	r := New(Config{Every: 20 * time.Millisecond, Gap: time.Millisecond, MinExcess: 8 << 20}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for range 64 { // 64 MiB of garbage
		sink = make([]byte, 1<<20)
	}
	sink = nil
	if ex := r.read().Excess(); ex < 48<<20 {
		t.Fatalf("the burst left %d bytes beyond the live heap, want about 64 MiB", ex)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go r.Run(ctx)
	for ctx.Err() == nil {
		if s := r.read(); s.Heap < 16<<20 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("heap still %+v after 5 s quiet", r.read())
}
