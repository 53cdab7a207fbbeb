package session

import (
	"testing"
	"time"
)

// TestReverseHorizon: the reverse path's horizon is the last moment every
// consumed partition was seen handed out to its end, less HorizonSlack; a
// partition behind its end, or held by an own record awaiting its local
// delivery, or never handed out in this run (unless its committed offset
// says it is at its end), holds it back.
func TestReverseHorizon(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" }, false)
	r0, r1, r2 := tp{"rev", 0}, tp{"rev", 1}, tp{"rev", 2}
	t1 := time.UnixMilli(1_000_000)
	want := func(at time.Time) int64 { return at.Add(-HorizonSlack).UnixMilli() }
	if h := rp.currentHorizon(); h != 0 {
		t.Fatalf("horizon %d before any check, want 0", h)
	}
	rp.handled(r0, 10)
	rp.check(map[tp]int64{r0: 10, r1: 0}, nil, t1) // r1 is empty
	if h := rp.currentHorizon(); h != want(t1) {
		t.Fatalf("horizon %d with every partition at its end, want %d", h, want(t1))
	}
	t2 := t1.Add(2 * time.Second)
	rp.check(map[tp]int64{r0: 15, r1: 0}, nil, t2) // r0 behind: 10 of 15
	if h := rp.currentHorizon(); h != want(t1) {
		t.Fatalf("horizon %d with rev/0 behind its end, want %d (when it last was at its end)", h, want(t1))
	}
	own := Coord{"rev", 0, 12}
	rp.LocalAcked(own)
	rp.handled(r0, 15) // skipped own 12
	t3 := t2.Add(2 * time.Second)
	rp.check(map[tp]int64{r0: 15, r1: 0}, nil, t3)
	if h := rp.currentHorizon(); h != want(t1) {
		t.Fatalf("horizon %d while own record 12 awaits its local delivery, want %d", h, want(t1))
	}
	rp.LocalDelivered(own)
	t4 := t3.Add(2 * time.Second)
	rp.check(map[tp]int64{r0: 15, r1: 0}, nil, t4)
	if h := rp.currentHorizon(); h != want(t4) {
		t.Fatalf("horizon %d after the local delivery, want %d", h, want(t4))
	}
	t5 := t4.Add(2 * time.Second)
	ends := map[tp]int64{r0: 15, r1: 0, r2: 7} // a partition nothing was handed out of yet
	rp.check(ends, nil, t5)
	if h := rp.currentHorizon(); h != 0 {
		t.Fatalf("horizon %d with rev/2 never handed out, want 0", h)
	}
	rp.check(ends, map[tp]int64{r2: 5}, t5)
	if h := rp.currentHorizon(); h != 0 {
		t.Fatalf("horizon %d with rev/2 committed at 5 of 7, want 0", h)
	}
	t6 := t5.Add(2 * time.Second)
	rp.check(ends, map[tp]int64{r2: 7}, t6) // its consumer starts at its end
	if h := rp.currentHorizon(); h != want(t6) {
		t.Fatalf("horizon %d with rev/2 committed at its end, want %d", h, want(t6))
	}
}

// TestSessionHorizon: a session's horizon follows the reverse path's while
// it is live, freezes when it goes, comes from its record when it resumes,
// and after its replay caught up is at least the replay's own; the
// partitions that replay only read are left out of the positions then
// (the horizon covers them), not while it reads.
func TestSessionHorizon(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" }, false)
	r0 := tp{"rev", 0}
	p := newSessionPositions(nil, nil, 0, rp)
	rp.handled(r0, 4)
	rp.check(map[tp]int64{r0: 4}, nil, time.UnixMilli(10_000))
	if h := p.horizon(); h != 9_000 {
		t.Fatalf("live session's horizon %d, want the reverse path's 9000", h)
	}
	p.wentOffline()
	rp.check(map[tp]int64{r0: 4}, nil, time.UnixMilli(20_000))
	if h := p.horizon(); h != 9_000 {
		t.Fatalf("offline session's horizon %d after the reverse path moved on, want 9000 (frozen)", h)
	}

	// Resumed elsewhere from a record with horizon 9000.
	q := newSessionPositions(nil, nil, 9_000, rp)
	q.notLive()
	q.startReplay(nil)
	if h := q.resumeHorizon(); h != 9_000 {
		t.Fatalf("resuming session's horizon %d, want the record's 9000", h)
	}
	q.replayed(r0, 4)
	q.replayed(tp{"fwd", 0}, 8) // not a reverse topic: its position stays
	if pos := q.snapshot(); len(pos) != 2 {
		t.Fatalf("positions while the replay reads: %+v, want rev/0 and fwd/0", pos)
	}
	if h := q.horizon(); h != 9_000 {
		t.Fatalf("horizon %d while the replay reads, want 9000", h)
	}
	q.caughtUp(15_000)
	if h := q.horizon(); h != 19_000 {
		t.Fatalf("caught-up session's horizon %d, want the reverse path's 19000", h)
	}
	if pos := q.snapshot(); len(pos) != 1 || pos[0].Topic != "fwd" {
		t.Fatalf("positions after the replay caught up: %+v, want fwd/0 only (the horizon covers rev/0)", pos)
	}
	q.sent(1, Coord{"rev", 0, 5}, 1)
	if pos := q.snapshot(); len(pos) != 2 {
		t.Fatalf("positions with a delivery of rev/0 pending: %+v, want rev/0 and fwd/0", pos)
	}
	if q.horizonStale() {
		t.Fatal("horizon stale right after it was written")
	}
	rp.check(map[tp]int64{r0: 4}, nil, time.UnixMilli(20_000+horizonRefresh.Milliseconds()))
	if !q.horizonStale() {
		t.Fatalf("horizon not stale after moving %s", horizonRefresh)
	}
}

// TestReplayCaughtUpAfterClientWentStaysOffline: a client that goes while
// its replay finishes leaves a session that is offline: the replay's end
// must not make it live again, or its horizon (and its positions) would
// follow what the reverse path hands out to nobody.
func TestReplayCaughtUpAfterClientWentStaysOffline(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" }, false)
	r0 := tp{"rev", 0}
	p := newSessionPositions(nil, nil, 5_000, rp)
	p.notLive()
	p.startReplay(nil)
	p.replayed(r0, 5)
	p.wentOffline() // the client goes before the replay's end
	p.caughtUp(8_000)
	rp.handled(r0, 50)
	rp.check(map[tp]int64{r0: 50}, nil, time.UnixMilli(60_000))
	if h := p.horizon(); h != 5_000 {
		t.Fatalf("horizon %d of a session whose client went during its replay, want 5000 (frozen at the record's)", h)
	}
	p.inherit() // the client is back on this instance: its next replay makes it live
	p.startReplay(nil)
	p.caughtUp(9_000)
	if h := p.horizon(); h != 59_000 {
		t.Fatalf("horizon %d after the next replay caught up, want the reverse path's 59000", h)
	}
}
