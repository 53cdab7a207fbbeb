package bridge

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Reading on demand (reverse.on_demand): a second reverse consumer, direct
// and without commits (reverse/demand.go), reads the Kafka topics the live
// subscriptions of this instance's clients can draw from, so that a
// subscriber here receives what every other instance's forward path (or
// any Kafka producer) writes to them. This instance's own records still
// reach its subscribers through the forward path's local delivery (the
// consumer skips them, reverse.skip_own); a persistent session's position
// never passes what the consumer has handed out (session.ReverseProgress),
// so a session acknowledging a local delivery cannot skip an older record
// another instance wrote.

// demandEvery is how often the live subscriptions are matched against the
// cluster's topics (a listing at most 5 s old): a new subscription or a new
// topic is read within about demandEvery plus that age.
const demandEvery = 500 * time.Millisecond

// demandSlack is how much earlier than first seen a filter's records are
// read: a subscription is seen up to demandEvery after its SUBACK, and a
// record's Kafka timestamp may be up to session.HorizonSlack behind; the
// time is then rounded down to the second, so that the topics of one round
// share their listing by time.
const demandSlack = demandEvery + session.HorizonSlack

// demander decides what the demand consumer reads.
type demander struct {
	server   *mqtt.Server
	engine   *session.Engine
	consumer *reverse.Consumer
	progress *session.ReverseProgress
	log      *slog.Logger

	mu     sync.Mutex
	seen   map[string]time.Time // live filter -> when first seen
	hinted map[string]string    // Kafka topic -> the MQTT topic this instance wrote there (ensure)
}

// startDemand builds the demand consumer on the reverse path's sink.
func (b *Bridge) startDemand(brokers []string) error {
	cfg := b.cfg.reverseConfig(brokers)
	// Always skip its own records: the forward path delivers them here.
	cfg.Demand, cfg.Topics, cfg.Hold, cfg.SkipOwn = true, nil, nil, true
	progress := b.stateEngine.ReverseProgress()
	cons, err := b.newReverse(cfg, b.metrics.demandMetrics(), progress.Demand)
	if err != nil {
		return err
	}
	b.demand = &demander{server: b.server, engine: b.stateEngine, consumer: cons, progress: progress,
		log: b.log.With("component", "demand"), seen: map[string]time.Time{}, hinted: map[string]string{}}
	return nil
}

// run matches the live subscriptions against the cluster's topics every
// demandEvery and tells the demand consumer what to read, until ctx ends.
func (d *demander) run(ctx context.Context) {
	t := time.NewTicker(demandEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		filters, hinted := d.filters(liveFilters(d.server))
		want := map[string]time.Time{}
		if len(filters) > 0 {
			var err error
			if want, err = d.engine.DemandTopics(ctx, filters); err != nil {
				d.log.Debug("topics not matched", "err", err)
				continue
			}
		}
		for k, since := range hinted {
			if at, ok := want[k]; !ok || since.Before(at) {
				want[k] = since
			}
		}
		added, dropped, err := d.consumer.Want(ctx, want)
		if err != nil && ctx.Err() == nil {
			d.log.Debug("topics not all read yet", "err", err)
		}
		if len(added) > 0 || len(dropped) > 0 {
			d.log.Debug("reading on demand", "added", added, "dropped", dropped, "reading", len(want))
		}
	}
}

// filters records the live filters and returns each with the time its
// records are read from, and the hinted topics a live filter still
// matches, with theirs (the others are forgotten).
func (d *demander) filters(live map[string]bool) (filters, hinted map[string]time.Time) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for f := range d.seen {
		if !live[f] {
			delete(d.seen, f)
		}
	}
	filters = make(map[string]time.Time, len(live))
	for f := range live {
		at, ok := d.seen[f]
		if !ok {
			at = now
			d.seen[f] = at
		}
		filters[f] = readFrom(at)
	}
	hinted = map[string]time.Time{}
	for k, m := range d.hinted {
		if since, ok := d.sinceLocked(m, filters); ok {
			hinted[k] = since
		} else {
			delete(d.hinted, k)
		}
	}
	return filters, hinted
}

// sinceLocked is the oldest time of the filters matching MQTT topic m;
// false: none does. Under mu.
func (d *demander) sinceLocked(m string, filters map[string]time.Time) (time.Time, bool) {
	var since time.Time
	for f, at := range filters {
		if topicmap.MatchFilter(f, m) && (since.IsZero() || at.Before(since)) {
			since = at
		}
	}
	return since, !since.IsZero()
}

// ensure makes the demand consumer read Kafka topic k, where this
// instance has just written a record of MQTT topic m that it delivers
// here, before that delivery: a persistent session acknowledging it then
// has a position capped by what the consumer handed out (with this
// instance's own records counted as delivered), never an unknown one.
// Nothing to do when it reads k already (the usual case: one map lookup).
func (d *demander) ensure(ctx context.Context, k, m string) {
	if d == nil || d.progress.Consumes(k) {
		return // read already, on demand or among reverse.topics
	}
	if subs := d.server.Topics.Subscribers(m); len(subs.Subscriptions) == 0 {
		return // nobody here wants it: the publisher's acknowledgement waits for nothing
	}
	d.mu.Lock()
	since, ok := d.sinceLocked(m, d.filtersLocked())
	if !ok {
		since = readFrom(time.Now()) // a subscription newer than the last round
	}
	d.hinted[k] = m
	d.mu.Unlock()
	err := d.consumer.Add(ctx, k, since)
	if err != nil && ctx.Err() == nil {
		d.log.Debug("topic not read yet", "topic", k, "err", err)
	}
}

// filtersLocked is the filters seen so far with their times; under mu.
func (d *demander) filtersLocked() map[string]time.Time {
	out := make(map[string]time.Time, len(d.seen))
	for f, at := range d.seen {
		out[f] = readFrom(at)
	}
	return out
}

// readFrom is the time a filter first seen at is read from.
func readFrom(at time.Time) time.Time { return at.Add(-demandSlack).Truncate(time.Second) }

// liveFilters are the filters of the subscriptions of the connected
// clients, but for shared subscriptions (package share reads for those).
func liveFilters(server *mqtt.Server) map[string]bool {
	out := map[string]bool{}
	for _, cl := range server.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		for f := range cl.State.Subscriptions.GetAll() {
			if !strings.HasPrefix(f, "$share/") { // the share groups read for those
				out[f] = true
			}
		}
	}
	return out
}
