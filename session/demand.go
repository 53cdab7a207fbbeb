package session

import (
	"context"
	"time"
)

// demandListAge is how old a listing DemandTopics uses may be: a topic
// another writer creates is read within about this long (one this
// instance writes to is read at once, before its first local delivery).
// Every instance lists every topic of the cluster this often while it has
// live subscriptions: a Metadata request of the whole cluster.
const demandListAge = 5 * time.Second

// DemandTopics maps the filters of the subscriptions live on this
// instance, each with the time it was first seen, to the Kafka topics they
// can draw from that are not among reverse.topics: the topics of the
// cluster's listing (at most demandListAge old; a listing of its own, so
// that a replay's last pass never waits behind it) whose names map back to a matching MQTT topic, each with the oldest time
// of the filters that match it. Ferry's own and Kafka's internal topics
// are never among them.
func (e *Engine) DemandTopics(ctx context.Context, filters map[string]time.Time) (map[string]time.Time, error) {
	r := e.hook.replays
	idx, err := e.demandTopics.indexed(ctx, time.Now().Add(-e.demandTopics.maxAge), r.isReverse)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for f, since := range filters {
		idx.matching(f, func(t string) {
			if r.isReverse(t) {
				return
			}
			if at, ok := out[t]; !ok || since.Before(at) {
				out[t] = since
			}
		})
	}
	return out, nil
}

// ShareTopics is DemandTopics for a shared subscription's consumer group
// (package share), which reads for every instance: the topics of
// reverse.topics too (their records' MQTT topics come from the reverse
// rules; the group leaves out those its filter does not match).
func (e *Engine) ShareTopics(ctx context.Context, filters map[string]time.Time) (map[string]time.Time, error) {
	r := e.hook.replays
	idx, err := e.demandTopics.indexed(ctx, time.Now().Add(-e.demandTopics.maxAge), r.isReverse)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	add := func(t string, since time.Time) {
		if at, ok := out[t]; !ok || since.Before(at) {
			out[t] = since
		}
	}
	for f, since := range filters {
		idx.matching(f, func(t string) { add(t, since) })
		for _, t := range idx.reverse {
			add(t, since)
		}
	}
	return out, nil
}
