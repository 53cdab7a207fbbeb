package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestReverseHorizon: the reverse path's horizon is the last moment every
// consumed partition was seen handed out to its end, less horizonSlack; a
// partition behind its end, or held by an own record awaiting its local
// delivery, or never handed out in this run (unless its committed offset
// says it is at its end), holds it back.
func TestReverseHorizon(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" })
	r0, r1, r2 := tp{"rev", 0}, tp{"rev", 1}, tp{"rev", 2}
	t1 := time.UnixMilli(1_000_000)
	want := func(at time.Time) int64 { return at.Add(-horizonSlack).UnixMilli() }
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
	own := coord{"rev", 0, 12}
	rp.localAcked(own)
	rp.handled(r0, 15) // skipped own 12
	t3 := t2.Add(2 * time.Second)
	rp.check(map[tp]int64{r0: 15, r1: 0}, nil, t3)
	if h := rp.currentHorizon(); h != want(t1) {
		t.Fatalf("horizon %d while own record 12 awaits its local delivery, want %d", h, want(t1))
	}
	rp.localDelivered(own)
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
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" })
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
	q.sent(1, coord{"rev", 0, 5})
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

// TestResumeReadsReverseTopicsFromHorizon: a reverse topic may carry any
// MQTT topic (the mqtt.topic header), so a resume reads every reverse
// partition the session has no position in. It reads them from the
// session's horizon, not from its subscription's time: the 2,000 records
// of another MQTT topic that the reverse path handed out while the session
// was live are not read again when it resumes on another instance. What
// came while it was away is still delivered, including a record of that
// same Kafka topic carrying the session's MQTT topic in its header. Before
// the horizon the replay read all 2,000 again.
func TestResumeReadsReverseTopicsFromHorizon(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kA, mA := revTopic(t, "hzna")
	kB, _ := revTopic(t, "hznb")
	kafkatest.CreateTopic(t, brokers, kA, 1, nil)
	kafkatest.CreateTopic(t, brokers, kB, 1, nil)
	cfg := reverseConfig(brokers, kA, kB)
	a := startBridge(t, cfg)
	id := "hzn-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	sub := connectPaho(t, a.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(mA, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	const noise = 2000
	recs := make([]*kgo.Record, noise)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: kB, Value: []byte("noise")}
	}
	pr := kgoProducer(t, brokers)
	produceAll(t, pr, recs)
	covers := time.Now().Add(-horizonSlack).UnixMilli()
	waitFor(t, 20*time.Second, "the reverse path's horizon past the noise", func() bool {
		return a.sessionHook.reverse.currentHorizon() >= covers
	})
	sub.Disconnect(250)
	waitFor(t, 10*time.Second, "the session's record after the disconnect", func() bool {
		rec := sessionIn(t, readTable(t, cfg.Kafka.Brokers, cfg.State.SessionsTopic), id)
		return rec != nil && !rec.Connected && rec.Horizon >= covers
	})

	produceAll(t, pr, []*kgo.Record{{Topic: kA, Value: []byte("a1")},
		{Topic: kB, Value: []byte("via-b"), Headers: []kgo.RecordHeader{{Key: topicmap.HeaderMQTTTopic, Value: []byte(mA)}}}})
	cfgB := cfg
	cfgB.Instance.ID = "test-" + randHex(4)
	b := startBridge(t, cfgB)
	read0 := metricValue(t, b, "ferry_sessions_replay_read_total", nil)
	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	want := map[string]bool{"a1": false, "via-b": false}
	deadline := time.After(20 * time.Second)
	for n := 0; n < len(want); {
		select {
		case p := <-got:
			if seen, ok := want[p]; ok && !seen {
				want[p] = true
				n++
			}
		case <-deadline:
			t.Fatalf("after the resume on another instance: %v (true: arrived)", want)
		}
	}
	if read := metricValue(t, b, "ferry_sessions_replay_read_total", nil) - read0; read >= noise/4 {
		t.Fatalf("the replay read %.0f records: it read again the %d the session's horizon covers", read, noise)
	}
}

// TestReplayCaughtUpAfterClientWentStaysOffline: a client that goes while
// its replay finishes leaves a session that is offline: the replay's end
// must not make it live again, or its horizon (and its positions) would
// follow what the reverse path hands out to nobody.
func TestReplayCaughtUpAfterClientWentStaysOffline(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" })
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

// TestHorizonAfterRestart: an instance restarted with the same id has
// handed out nothing in its new run of a partition that got no record
// since; its group's committed offset at the end says nothing is left
// there, so the horizon moves (else it stayed 0, and every resume read from
// the subscriptions' time, until each consumed partition had a record).
func TestHorizonAfterRestart(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	kA, _ := revTopic(t, "hzra")
	kafkatest.CreateTopic(t, brokers, kA, 2, nil)
	cfg := reverseConfig(brokers, kA)
	a := startBridge(t, cfg)
	recs := []*kgo.Record{{Topic: kA, Partition: 0, Value: []byte("x")}, {Topic: kA, Partition: 1, Value: []byte("y")}}
	pr, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	produceAll(t, pr, recs)
	waitFor(t, 20*time.Second, "the first run's horizon", func() bool { return a.sessionHook.reverse.currentHorizon() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	b := startBridge(t, cfg) // same instance id: same reverse group
	waitFor(t, 20*time.Second, "the restarted instance's horizon", func() bool {
		return b.sessionHook.reverse.currentHorizon() >= restarted.Add(-horizonSlack).UnixMilli()
	})
}
