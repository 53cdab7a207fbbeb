package session

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/topicmap"
)

// TestTopicListerShares: replays share a listing young enough for them; a
// listing requested before the time a caller needs is not reused.
func TestTopicListerShares(t *testing.T) {
	calls := 0
	l := &topicLister{maxAge: time.Hour, list: func(context.Context) ([]string, error) {
		calls++
		return []string{"t"}, nil
	}}
	ctx := context.Background()
	for range 3 {
		if _, err := l.recent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("3 first passes within maxAge listed the topics %d times, want 1", calls)
	}
	live := time.Now()
	if _, err := l.since(ctx, live); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("a last pass whose subscriptions went live after the listing reused it (%d listings, want 2)", calls)
	}
	if _, err := l.since(ctx, live); err != nil || calls != 2 {
		t.Fatalf("a listing requested after the subscriptions went live was not reused (%d listings, want 2, err %v)", calls, err)
	}
}

// TestTopicIndexMatchesAsEachName: the listing's index finds, for every
// filter, exactly the topics whose decoded MQTT topic the filter matches
// (what each replay found by decoding and matching every name).
func TestTopicIndexMatchesAsEachName(t *testing.T) {
	mqttTopics := []string{"a", "a/b", "a/b/c", "a/c", "/a", "/a/b", "b/a", "$SYS/x", "a//b", "a/b/", "tacos/pub/lf", "x/y/z/w"}
	var names []string
	for _, m := range mqttTopics {
		k, err := topicmap.EncodeTopic(m)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, k)
	}
	names = append(names, "_ferry_sessions", "__consumer_offsets", "rev-1")
	isReverse := func(n string) bool { return strings.HasPrefix(n, "rev-") }
	idx := newTopicIndex(names, isReverse)
	filters := []string{"#", "+", "a", "a/#", "a/+", "a/+/c", "+/b", "/#", "/+/b", "+/+", "a/b/#", "$SYS/#", "+/x", "a//b", "a/b/+", "tacos/pub/lf", "x/+/z/#", "nothing/#"}
	for _, f := range filters {
		want := map[string]bool{}
		for _, n := range names {
			if m, err := topicmap.DecodeTopic(n); err == nil && !topicmap.IsFerryTopic(n) && !topicmap.IsInternalKafkaTopic(n) && topicmap.MatchFilter(f, m) {
				want[n] = true
			}
		}
		got := map[string]bool{}
		idx.matching(f, func(n string) {
			if got[n] {
				t.Errorf("filter %q: %s twice", f, n)
			}
			got[n] = true
		})
		if !maps.Equal(got, want) {
			t.Errorf("filter %q: index found %v, each name matched %v", f, got, want)
		}
	}
	if len(idx.reverse) != 1 || idx.reverse[0] != "rev-1" || idx.all["_ferry_sessions"] {
		t.Errorf("reverse %v, Ferry topic in the index %v", idx.reverse, idx.all["_ferry_sessions"])
	}
}

// TestTopicListerSpacesListings: listings start at least minGap apart;
// the callers that needed a newer one meanwhile share the next.
func TestTopicListerSpacesListings(t *testing.T) {
	var calls atomic.Int32
	l := &topicLister{maxAge: time.Hour, minGap: 100 * time.Millisecond, list: func(context.Context) ([]string, error) {
		calls.Add(1)
		return []string{"t"}, nil
	}}
	ctx := context.Background()
	start := time.Now()
	if _, err := l.since(ctx, start); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.since(ctx, time.Now()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if took := time.Since(start); took < l.minGap {
		t.Errorf("a second listing %s after the first, want at least %s", took, l.minGap)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("21 callers, each needing a listing after its call: %d listings, want 2", n)
	}
}

// TestTopicListerSpacesSlowListings: a listing that took 40 ms spaces the
// next by ten times that (a big cluster's listing costs Kafka and the
// instance: at most about a tenth of the time listing), and never by more
// than topicsMaxGap.
func TestTopicListerSpacesSlowListings(t *testing.T) {
	var starts []time.Time
	l := &topicLister{maxAge: time.Hour, minGap: 10 * time.Millisecond, list: func(context.Context) ([]string, error) {
		starts = append(starts, time.Now()) // under l.mu
		time.Sleep(40 * time.Millisecond)
		return []string{"t"}, nil
	}}
	ctx := context.Background()
	for range 2 {
		if _, err := l.since(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if gap := starts[1].Sub(starts[0]); gap < 400*time.Millisecond {
		t.Errorf("a listing of 40 ms, the next started %s later, want at least 400ms", gap)
	}
	l.took = time.Minute
	at := time.Now()
	if _, err := l.since(ctx, at); err != nil {
		t.Fatal(err)
	}
	if wait := starts[2].Sub(at); wait > topicsMaxGap+500*time.Millisecond {
		t.Errorf("after a listing of a minute, the next waited %s, want at most %s", wait, topicsMaxGap)
	}
}

// TestTopicListerSeesNewTopic: a listing requested after a topic was
// created has it, also when the client listed the topics a moment before
// (kadm's ListTopics answered from kgo's metadata cache, up to 5 s old: a
// last pass missed a topic created after its subscriptions went live).
func TestTopicListerSeesNewTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := newTopicLister(cl)
	l.minGap = 0
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "old"); err != nil {
		t.Fatal(err)
	}
	if names, err := l.since(ctx, time.Now()); err != nil || !slices.Contains(names, "old") {
		t.Fatalf("first listing %v, %v: want the topic old", names, err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "new"); err != nil {
		t.Fatal(err)
	}
	names, err := l.since(ctx, time.Now())
	if err != nil || !slices.Contains(names, "new") {
		t.Fatalf("a listing requested after the topic new was created: %v, %v", names, err)
	}
}

// TestTopicListerServesFromCacheDuringAListing: a caller that the newest
// listing serves (a first pass) gets it at once while a newer listing, for a
// last pass, is on its way; the last pass gets a listing that started after
// its call. (The listing was made under the lister's lock: a storm's first
// passes waited behind last passes.)
func TestTopicListerServesFromCacheDuringAListing(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	l := &topicLister{maxAge: time.Hour, list: func(context.Context) ([]string, error) {
		if calls.Add(1) == 2 {
			<-release // the last pass's listing hangs until the first pass is served
			return []string{"t", "new"}, nil
		}
		return []string{"t"}, nil
	}}
	ctx := context.Background()
	if _, err := l.recent(ctx); err != nil {
		t.Fatal(err)
	}
	live := time.Now()
	last := make(chan []string, 1)
	go func() {
		names, err := l.since(ctx, live)
		if err != nil {
			t.Error(err)
		}
		last <- names
	}()
	for deadline := time.Now().Add(5 * time.Second); calls.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last pass's listing did not start within 5 s")
		}
	}
	served := make(chan error, 1)
	go func() {
		_, err := l.recent(ctx)
		served <- err
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("a first pass the cached listing serves waited for a listing in flight")
	}
	close(release)
	if names := <-last; !slices.Contains(names, "new") {
		t.Fatalf("the last pass got %v, not the listing that started after its call", names)
	}
}
