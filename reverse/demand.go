package reverse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A demand consumer (Config.Demand) is how an instance reads the Kafka
// topics its live subscribers can draw from, beside reverse.topics: the
// data topics other instances' forward paths write (a subscriber on A gets
// what was published on B) and topics other Kafka producers write under
// names that map to a subscribed MQTT topic. It is a direct consumer,
// without a group or commits: what it reads is for the subscriptions that
// are live now, each topic from the first record newer than the oldest
// subscription that wants it (a persistent session's earlier records are
// its replay's, from its positions). Its caller says what to read (Want);
// a topic nobody wants any longer is dropped, and read again from the
// subscriptions' time when wanted again.

// Want makes the demand consumer read exactly the topics of want, each new
// one from its first record newer than want[topic]. A topic whose
// partitions cannot be listed now is tried again at the next call. It
// returns the topics it started and stopped reading. Not for a group
// consumer (reverse.topics): it returns an error.
func (r *Consumer) Want(ctx context.Context, want map[string]time.Time) (added, dropped []string, err error) {
	if !r.cfg.Demand {
		return nil, nil, fmt.Errorf("reverse: Want on a consumer of reverse.topics")
	}
	r.wantMu.Lock()
	defer r.wantMu.Unlock()
	for t := range r.reading {
		if _, ok := want[t]; !ok {
			dropped = append(dropped, t)
		}
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		r.client.PurgeTopicsFromConsuming(dropped...)
		parts := map[string][]int32{}
		for _, t := range dropped {
			parts[t] = r.reading[t]
			delete(r.reading, t)
		}
		forgetLag(r.metrics, parts)
		for _, t := range dropped {
			r.demanded(t, false)
		}
	}
	// The new topics, grouped by the time they are read from (the listing
	// by time takes one time per request).
	byTime := map[time.Time][]string{}
	for t, since := range want {
		if _, ok := r.reading[t]; !ok {
			byTime[since] = append(byTime[since], t)
		}
	}
	adm := kadm.NewClient(r.client)
	for _, since := range slices.SortedFunc(maps.Keys(byTime), time.Time.Compare) {
		if serr := r.start(ctx, adm, since, byTime[since], &added); serr != nil {
			err = serr
		}
	}
	slices.Sort(added)
	return added, dropped, err
}

// Add makes the demand consumer read topic too, from its first record
// newer than since, unless it reads it already (Want keeps it only while
// its caller wants it). For a topic the caller learned of before its
// listing has it: this instance's forward path writes to it.
func (r *Consumer) Add(ctx context.Context, topic string, since time.Time) error {
	if !r.cfg.Demand {
		return fmt.Errorf("reverse: Add on a consumer of reverse.topics")
	}
	r.wantMu.Lock()
	defer r.wantMu.Unlock()
	if _, ok := r.reading[topic]; ok {
		return nil
	}
	return r.start(ctx, kadm.NewClient(r.client), since, []string{topic}, nil)
}

// start starts reading topics, each from its first record newer than
// since, and appends to added those it started; under wantMu. A topic
// whose partitions are not listed yet is left for the next call.
func (r *Consumer) start(ctx context.Context, adm *kadm.Client, since time.Time, topics []string, added *[]string) error {
	starts, err := firstAfter(ctx, adm, since, topics)
	if err != nil {
		return fmt.Errorf("reverse: start offsets of %v: %w", topics, err)
	}
	add := map[string]map[int32]kgo.Offset{}
	for _, t := range topics {
		ps := starts[t]
		if len(ps) == 0 {
			continue
		}
		add[t] = map[int32]kgo.Offset{}
		for p, at := range ps {
			add[t][p] = kgo.NewOffset().At(at)
			r.reading[t] = append(r.reading[t], p)
			// Everything before the start is not this consumer's to hand
			// out: a session's position may stand there.
			r.sink.Handled(t, p, at)
		}
		r.demanded(t, true)
		if added != nil {
			*added = append(*added, t)
		}
	}
	r.client.AddConsumePartitions(add)
	return nil
}

// Reading reports whether the demand consumer reads Kafka topic t now.
func (r *Consumer) Reading(t string) bool {
	r.wantMu.Lock()
	defer r.wantMu.Unlock()
	_, ok := r.reading[t]
	return ok
}
