package session

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAnswerForCoversOnlyFromItsOffset: a fetch asked for while a round
// from further on was under way is not answered by that round (it would
// miss its first records).
func TestAnswerForCoversOnlyFromItsOffset(t *testing.T) {
	recs := []*kgo.Record{{Offset: 43}, {Offset: 44}}
	f := fetched{recs: recs, hwm: 50, logStart: -1}
	if _, ok := answerFor(42, 43, f); ok {
		t.Error("a fetch from 42 answered by a round from 43")
	}
	if a, ok := answerFor(44, 43, f); !ok || len(a.recs) != 1 || a.recs[0].Offset != 44 {
		t.Errorf("a fetch from 44 of a round from 43: %v %v", a.recs, ok)
	}
	if _, ok := answerFor(45, 43, f); ok {
		t.Error("a fetch from 45 answered by records up to 44")
	}
	if a, ok := answerFor(50, 43, f); !ok || len(a.recs) != 0 {
		t.Errorf("a fetch from the high watermark: %v %v", a.recs, ok)
	}
	// Compaction leaves gaps: a fetch from an offset that is gone starts
	// at the next record there is, wherever it is in the answer.
	var gaps []*kgo.Record
	for o := int64(100); o < 400; o += 3 {
		gaps = append(gaps, &kgo.Record{Offset: o})
	}
	f = fetched{recs: gaps, hwm: 400, logStart: -1}
	for _, c := range []struct{ off, first int64 }{{100, 100}, {101, 103}, {250, 250}, {251, 253}, {397, 397}} {
		if a, ok := answerFor(c.off, 100, f); !ok || len(a.recs) == 0 || a.recs[0].Offset != c.first || a.recs[len(a.recs)-1].Offset != 397 {
			t.Errorf("a fetch from %d: ok %v, %d records, want them from %d to 397", c.off, ok, len(a.recs), c.first)
		}
	}
	if _, ok := answerFor(398, 100, f); ok {
		t.Error("a fetch from 398 answered by records up to 397 (the high watermark is 400)")
	}
}

// TestReadsShareFetches: 100 replays' fetches of one partition, each from
// an offset of its own and read to the end, get every record from their
// offset on exactly once, in order, with far fewer Fetch requests than
// replays (kfake, and real Kafka when FERRY_TEST_KAFKA is set).
func TestReadsShareFetches(t *testing.T) {
	t.Run("kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		var fetches atomic.Int64
		c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			fetches.Add(1)
			return nil, nil, false
		})
		sharedFetches(t, c.ListenAddrs(), &fetches)
	})
	if b := os.Getenv("FERRY_TEST_KAFKA"); b != "" {
		t.Run("kafka", func(t *testing.T) { sharedFetches(t, strings.Split(b, ","), nil) })
	}
}

func sharedFetches(t *testing.T, brokers []string, fetches *atomic.Int64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := fmt.Sprintf("reads-%d", rand.Int64())
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := newReads(cl, false)
	k := tp{topic, 0}
	ends, err := r.endOffsets(ctx, []string{topic}, false)
	if err != nil || ends[k] != n {
		t.Fatalf("end offsets %v (%v), want %d", ends, err, n)
	}
	if fetches != nil {
		fetches.Store(0)
	}
	const replays = 100
	var wg sync.WaitGroup
	errs := make(chan error, replays)
	for i := range replays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := int64(i * n / replays / 2)
			for next < n {
				got, err := r.fetch(ctx, map[tp]int64{k: next})
				if err != nil {
					errs <- err
					return
				}
				f := got[k]
				if f.err != nil {
					errs <- f.err
					return
				}
				for _, rec := range f.recs {
					if rec.Offset != next || string(rec.Value) != fmt.Sprint(next) {
						errs <- fmt.Errorf("replay %d: record %d (%q) where %d was next", i, rec.Offset, rec.Value, next)
						return
					}
					next++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if fetches != nil {
		if got := fetches.Load(); got > replays*2 {
			t.Errorf("%d Fetch requests for %d replays of one partition: not shared", got, replays)
		} else {
			t.Logf("%d replays of one partition: %d Fetch requests", replays, got)
		}
	}
	// By time: the first record at or after a time, and -1 after the last.
	after, err := r.offsetsAfter(ctx, map[tp]int64{k: time.Now().Add(time.Hour).UnixMilli()})
	if err != nil || after[k] != -1 {
		t.Errorf("offset after an hour from now: %v (%v), want -1", after, err)
	}
	after, err = r.offsetsAfter(ctx, map[tp]int64{k: 0})
	if err != nil || after[k] != 0 {
		t.Errorf("offset after time 0: %v (%v), want 0", after, err)
	}
	// 50 queries at once of one partition, each at a time of its own (the
	// sessions of a group): each gets its own answer.
	var qg sync.WaitGroup
	qerrs := make(chan error, 50)
	for j := range 50 {
		qg.Add(1)
		go func() {
			defer qg.Done()
			want := int64(j * 37)
			got, err := r.offsetsAfter(ctx, map[tp]int64{k: base.Add(time.Duration(want) * time.Millisecond).UnixMilli()})
			if err != nil || got[k] != want {
				qerrs <- fmt.Errorf("offset after record %d's time: %v (%v)", want, got, err)
			}
		}()
	}
	qg.Wait()
	close(qerrs)
	for err := range qerrs {
		t.Error(err)
	}
}

// TestFetchAskedDuringARoundWaitsForTheNext: a fetch asked for while a
// round was on its way is not answered by that round, even when the
// answer reaches its offset: the answer may be older than what the caller
// knows. (A high watermark of 34 from a round started before the caller
// listed an end of 40 read as "nothing more": 34-39 were skipped.)
func TestFetchAskedDuringARoundWaitsForTheNext(t *testing.T) {
	r := newReads(nil, false)
	k := tp{"t", 0}
	early := &fetchWait{off: 34, ans: make(chan fetched, 1), joined: 0}
	late := &fetchWait{off: 34, ans: make(chan fetched, 1), joined: 1}
	r.fetches[k] = []*fetchWait{early, late}
	r.settle(1, map[tp]int64{k: 30}, map[tp]fetched{k: {hwm: 34, logStart: -1, recs: []*kgo.Record{{Offset: 30}, {Offset: 33}}}})
	select {
	case a := <-early.ans:
		if len(a.recs) != 0 || a.hwm != 34 {
			t.Errorf("the waiting fetch got %+v", a)
		}
	default:
		t.Error("the fetch waiting when the round started got no answer")
	}
	select {
	case a := <-late.ans:
		t.Errorf("a fetch asked for during the round got its answer %+v", a)
	default:
	}
	if ws := r.fetches[k]; len(ws) != 1 || ws[0] != late {
		t.Errorf("waiting after the round: %v, want the late fetch", ws)
	}
}

// TestOffsetsAfterKeepsAnswers: a time asked again of a partition, in a
// later round, is answered without another ListOffsets request while the
// answer names an offset; a time with no record at or after it yet is
// asked again (one may have come).
func TestOffsetsAfterKeepsAnswers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var lists atomic.Int64
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "times"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Timestamp: base.Add(time.Duration(i) * time.Second)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r := newReads(cl, false)
	k := tp{topic, 0}
	ask := func(ms int64) int64 {
		t.Helper()
		got, err := r.offsetsAfter(ctx, map[tp]int64{k: ms})
		if err != nil {
			t.Fatal(err)
		}
		return got[k]
	}
	at3 := base.Add(3 * time.Second).UnixMilli()
	if off := ask(at3); off != 3 {
		t.Fatalf("offset after the 4th record's time: %d, want 3", off)
	}
	before := lists.Load()
	for range 5 {
		if off := ask(at3); off != 3 {
			t.Fatalf("asked again: %d, want 3", off)
		}
	}
	if n := lists.Load() - before; n != 0 {
		t.Errorf("the same time asked 5 more times: %d ListOffsets requests, want 0", n)
	}
	future := time.Now().Add(time.Hour).UnixMilli()
	ask(future)
	before = lists.Load()
	if off := ask(future); off != -1 {
		t.Fatalf("offset after a time with no record: %d, want -1", off)
	}
	if n := lists.Load() - before; n != 1 {
		t.Errorf("a time with no record yet asked again: %d ListOffsets requests, want 1", n)
	}
}

// TestEndOffsetsFirstPassJoinsListingOnItsWay: a first pass (anyListing)
// takes the end offsets of a listing already on its way that names its
// topics; a last pass waits for a listing that starts after its call.
func TestEndOffsetsFirstPassJoinsListingOnItsWay(t *testing.T) {
	started := make(chan int, 4)
	release := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	close(release[2])
	calls := 0
	r := &reads{listEnds: func(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
		i := calls // one listing at a time (endsLoop)
		calls++
		started <- i
		<-release[i]
		out := kadm.ListedOffsets{}
		for _, topic := range topics {
			out[topic] = map[int32]kadm.ListedOffset{0: {Topic: topic, Partition: 0, Offset: int64(10 * (i + 1))}}
		}
		return out, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := r.joinEnds([]string{"t"}, false)
	if i := <-started; i != 0 {
		t.Fatalf("listing %d started first", i)
	}
	joined := r.joinEnds([]string{"t"}, true)     // the first listing, on its way, names "t"
	other := r.joinEnds([]string{"t", "u"}, true) // it does not name "u"
	last := r.joinEnds([]string{"t"}, false)      // needs a listing that starts after it
	if joined != first {
		t.Fatal("a first pass did not join the listing on its way")
	}
	if last == first || other == first {
		t.Fatal("a last pass, or a first pass for a topic it does not list, joined the listing on its way")
	}
	close(release[0])
	if i := <-started; i != 1 {
		t.Fatalf("listing %d started second", i)
	}
	close(release[1])
	for _, c := range []struct {
		round *endsRound
		want  int64
	}{{joined, 10}, {last, 20}} {
		select {
		case <-c.round.done:
		case <-ctx.Done():
			t.Fatal("no answer within 10 s")
		}
		if ends, err := c.round.endsOf([]string{"t"}); err != nil || ends[tp{"t", 0}] != c.want {
			t.Fatalf("got %v (%v), want end %d", ends, err, c.want)
		}
	}
	if ends, err := r.endOffsets(ctx, []string{"t"}, true); err != nil || ends[tp{"t", 0}] == 0 {
		t.Fatalf("endOffsets: %v (%v)", ends, err)
	}
}
