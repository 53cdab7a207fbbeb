package session

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/topicmap"
)

// topicLister shares the cluster's topic listing among the replays of an
// instance. Each pass of each replay listed every topic (thousands on a dev
// cluster): with a reconnect storm this was much of a replay's time. A
// listing is shared while it is young enough for the caller:
//
//   - the first pass takes one up to topicsMaxAge old. A topic created
//     since is missed there, and found by the last pass;
//   - the last pass takes only a listing requested after its session's
//     subscriptions went live (as the uncached listing was), and starts a
//     partition the first pass did not read from the session's position, or
//     its subscription's time (replay.go pass): nothing the first pass
//     missed is skipped.
//
// One listing is requested at a time; replays needing a newer one wait for
// the next, and a caller that the newest listing serves never waits behind
// them (a storm's first passes were held up, behind last passes waiting out
// the gap to the next listing, for a listing they did not need: 1.3 s at
// the median of a 10,000-session storm).
type topicLister struct {
	list   func(ctx context.Context) ([]string, error)
	maxAge time.Duration
	minGap time.Duration            // between the starts of two listings
	onList func(time.Duration, int) // if not nil: each listing's time (debug)

	mu    sync.Mutex
	at    time.Time     // when the cached listing was requested
	took  time.Duration // how long it took
	names []string      // shared: read only
	idx   *topicIndex   // of names, built on first use (indexed)
	// next is the listing callers join that need a newer one than names:
	// not started yet (it starts after them), so it serves them all.
	next *listRound
	// last is the newest listing started; the next starts once it is done.
	last *listRound
}

// listRound is one listing and the callers waiting for it.
type listRound struct {
	done chan struct{}
	err  error
}

// topicsMaxAge is how old a listing the first pass of a replay may use.
const topicsMaxAge = 2 * time.Second

// topicsMinGap is the least time between the starts of two listings;
// a listing that took long spaces the next by topicsGapFactor times its
// time, up to topicsMaxGap. A cluster's full listing costs Kafka and the
// instance in proportion to its topics (with 6,000 topics, Metadata was
// a third of the broker's CPU in a 10,000-session storm, a listing every
// 200 ms per instance): at most about a tenth of the time is spent
// listing. The wait is a last pass's (its live deliveries wait for it);
// a first pass takes a listing up to topicsMaxAge old.
const (
	topicsMinGap    = 200 * time.Millisecond
	topicsGapFactor = 10
	topicsMaxGap    = time.Second
)

// newTopicLister lists with a Metadata request of its own each time.
// kadm's ListTopics answers from the client's metadata cache when it is
// younger than kgo's MetadataMinAge (5 s): a last pass then missed a topic
// created after its subscriptions went live (the first record of a new
// MQTT topic, published during a resume, was never delivered).
func newTopicLister(cl *kgo.Client) *topicLister {
	return &topicLister{maxAge: topicsMaxAge, minGap: topicsMinGap, list: func(ctx context.Context) ([]string, error) {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // Topics nil: every topic
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(resp.Topics))
		for _, t := range resp.Topics {
			if t.Topic == nil {
				continue
			}
			if t.ErrorCode == kerr.TopicAuthorizationFailed.Code {
				continue // not ours to read; a topic still electing a leader is listed
			}
			names = append(names, *t.Topic)
		}
		return names, nil
	}}
}

// recent returns a listing at most maxAge old.
func (l *topicLister) recent(ctx context.Context) ([]string, error) {
	return l.since(ctx, time.Now().Add(-l.maxAge))
}

// since returns a listing requested at or after t (t is not in the future).
func (l *topicLister) since(ctx context.Context, t time.Time) ([]string, error) {
	for {
		l.mu.Lock()
		if l.names != nil && !l.at.Before(t) {
			names := l.names
			l.mu.Unlock()
			return names, nil
		}
		round := l.next
		if round == nil {
			round = &listRound{done: make(chan struct{})}
			l.next = round
			go l.run(round, l.last)
			l.last = round
		}
		l.mu.Unlock()
		select {
		case <-round.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("list topics: %w", ctx.Err())
		}
		if round.err != nil {
			return nil, round.err
		}
		// The round started after this call: its listing serves it, unless
		// a newer one replaced it meanwhile (newer still serves it).
	}
}

// run makes one listing once the one before it is done and the gap since
// that one's start has passed: listings at most every topicsMinGap, or
// topicsGapFactor times the last one's time. A storm's replays go live one
// after the other, and each listing of a big cluster costs the instance
// tens of milliseconds of CPU; those that went live meanwhile share the
// next one (it starts after them).
func (l *topicLister) run(round, prev *listRound) {
	if prev != nil {
		<-prev.done
	}
	l.mu.Lock()
	gap := l.minGap
	if gap > 0 {
		gap = max(gap, min(topicsGapFactor*l.took, topicsMaxGap))
	}
	wait := time.Until(l.at.Add(gap))
	l.mu.Unlock()
	if wait > 0 && prev != nil {
		time.Sleep(wait)
	}
	l.mu.Lock()
	l.next = nil // callers from now on need a listing after this one's start
	l.mu.Unlock()
	at := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), topicsListTimeout)
	names, err := l.list(ctx)
	cancel()
	took := time.Since(at)
	if l.onList != nil {
		l.onList(took, len(names))
	}
	l.mu.Lock()
	if err != nil {
		round.err = fmt.Errorf("list topics: %w", err)
	} else {
		if names == nil {
			names = []string{}
		}
		l.at, l.took, l.names, l.idx = at, took, names, nil
	}
	l.mu.Unlock()
	close(round.done)
}

// topicsListTimeout bounds one listing (its callers leave earlier when their
// context ends; the listing they shared goes on for the others).
const topicsListTimeout = 30 * time.Second

// indexed is since with the listing's index (built once per listing, for
// every replay that takes it): a replay of a cluster with thousands of
// topics decoded and matched each name against its filters, twice, and a
// storm of 5,000 replays spent most of its time there.
func (l *topicLister) indexed(ctx context.Context, t time.Time, isReverse func(string) bool) (*topicIndex, error) {
	for {
		l.mu.Lock()
		if l.names != nil && !l.at.Before(t) {
			// The newest listing, if new enough (a caller that took an
			// older one builds no index of its own).
			if l.idx == nil {
				l.idx = newTopicIndex(l.names, isReverse)
			}
			idx := l.idx
			l.mu.Unlock()
			return idx, nil
		}
		l.mu.Unlock()
		if _, err := l.since(ctx, t); err != nil {
			return nil, err
		}
	}
}

// topicIndex is one topic listing ready for matching: the reverse topics,
// and the others by the levels of the MQTT topic their name decodes to.
// Ferry's own and Kafka's internal topics are left out.
type topicIndex struct {
	all     map[string]bool
	reverse []string
	root    topicLevel
}

type topicLevel struct {
	kids map[string]*topicLevel
	here []decodedTopic // MQTT topics that end at this level
}

type decodedTopic struct{ kafka, mqtt string }

func newTopicIndex(names []string, isReverse func(string) bool) *topicIndex {
	x := &topicIndex{all: make(map[string]bool, len(names))}
	for _, name := range names {
		if topicmap.IsFerryTopic(name) || topicmap.IsInternalKafkaTopic(name) {
			continue
		}
		x.all[name] = true
		if isReverse(name) {
			x.reverse = append(x.reverse, name)
		}
		m, err := topicmap.DecodeTopic(name)
		if err != nil {
			continue
		}
		n := &x.root
		for rest, more := m, true; more; {
			var lvl string
			lvl, rest, more = strings.Cut(rest, "/")
			if n.kids == nil {
				n.kids = map[string]*topicLevel{}
			}
			next := n.kids[lvl]
			if next == nil {
				next = &topicLevel{}
				n.kids[lvl] = next
			}
			n = next
		}
		n.here = append(n.here, decodedTopic{kafka: name, mqtt: m})
	}
	return x
}

// matching calls add for every topic whose MQTT topic filter matches: it
// follows the filter's levels up to its first wildcard and checks what is
// below there (topicmap.MatchFilter decides).
func (x *topicIndex) matching(filter string, add func(kafkaTopic string)) {
	n := &x.root
	for rest, more := filter, true; more; {
		var lvl string
		lvl, rest, more = strings.Cut(rest, "/")
		if lvl == "+" || lvl == "#" {
			break
		}
		if n = n.kids[lvl]; n == nil {
			return
		}
	}
	var walk func(n *topicLevel)
	walk = func(n *topicLevel) {
		for _, t := range n.here {
			if topicmap.MatchFilter(filter, t.mqtt) {
				add(t.kafka)
			}
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(n)
}
