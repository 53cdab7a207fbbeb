package share

import (
	"context"
	"errors"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/topicmap"
)

// group is one shared subscription's consumer group member on this
// instance: its Kafka client, its members here, and what they owe.
type group struct {
	m                     *Manager
	key, name, filter, id string
	origin                string    // its deliveries' packet origin (Manager.publish)
	since                 time.Time // records are read from it in partitions without a commit

	client  *kgo.Client // nil until the filter's topics are known
	topics  map[string]bool
	conv    reverse.Converter // the run goroutine's
	cancel  context.CancelFunc
	running sync.WaitGroup // run and commitLoop
	wake    chan struct{}  // an acknowledgement or a member came: a full group may go on

	// commitMu makes a commit and what follows it one step: no periodic
	// commit of what a revocation has just taken away.
	commitMu sync.Mutex

	// The group's series, resolved once: not per message.
	delivered, redelivered prometheus.Counter
	lag                    prometheus.Gauge

	state // under state.mu
}

// newGroup makes the group of shared subscription key, reading the
// partitions it has no commit for from since (the first member's
// SUBSCRIBE here).
func newGroup(m *Manager, key, name, filter string, since time.Time) *group {
	g := &group{m: m, key: key, name: name, filter: filter, id: GroupName(name, filter), origin: "ferry-share/" + key,
		since: since, topics: map[string]bool{}, wake: make(chan struct{}, 1),
		conv:      reverse.Converter{Topics: m.d.Topics, MaxPacketSize: m.cfg.MaxPacketSize},
		delivered: m.d.Metrics.Delivered.WithLabelValues(key), redelivered: m.d.Metrics.Redelivered.WithLabelValues(key),
		lag: m.d.Metrics.Lag.WithLabelValues(key)}
	g.state.init()
	return g
}

// consume joins the consumer group over topics (on the first call that
// has some) or adds the new ones.
func (g *group) consume(ctx context.Context, topics map[string]time.Time) error {
	var added []string
	for t := range topics {
		if !g.topics[t] {
			added = append(added, t)
		}
	}
	if len(added) == 0 {
		return nil
	}
	if g.client != nil {
		g.client.AddConsumeTopics(added...)
		for _, t := range added {
			g.topics[t] = true
		}
		return nil
	}
	cfg := g.m.cfg
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("ferry-" + cfg.InstanceID + "-share"),
		kgo.ConsumerGroup(g.id),
		kgo.ConsumeTopics(added...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(max(cfg.SessionTimeout/10, time.Second)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(g.since.UnixMilli())),
		kgo.FetchIsolationLevel(reverse.Isolation(cfg.ReadUncommitted)),
		kgo.OnPartitionsAssigned(g.assigned),
		kgo.OnPartitionsRevoked(g.revoked),
		kgo.OnPartitionsLost(g.lost),
	}, g.m.d.KafkaOpts...)
	// Partitions without a commit start at the first record after since,
	// without the race of kgo's own time reset (reverse.StartOffsets): kgo
	// may call it before NewClient has returned.
	created := make(chan struct{})
	opts = append(opts, kgo.AdjustFetchOffsetsFn(reverse.StartOffsets(g.id, g.since,
		func() *kgo.Client { <-created; return g.client }, g.m.log)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	g.client = cl
	close(created)
	for _, t := range added {
		g.topics[t] = true
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	g.running.Add(2)
	go g.run(runCtx)
	go g.commitLoop(runCtx)
	g.m.log.Debug("share group joined", "group", g.key, "kafka_group", g.id, "topics", added)
	return nil
}

// stop leaves the consumer group after committing what was acknowledged.
func (g *group) stop(ctx context.Context) {
	if g.client == nil {
		return
	}
	g.cancel()
	g.running.Wait()
	g.commit(ctx)
	g.client.Close() // leaves the group: the partitions go to the others
	g.m.d.Metrics.Members.DeleteLabelValues(g.key)
	g.m.d.Metrics.Partitions.DeleteLabelValues(g.key)
	g.m.d.Metrics.Lag.DeleteLabelValues(g.key)
}

// commitEvery is how often acknowledged progress is committed.
const commitEvery = time.Second

// commitLoop commits acknowledged progress every commitEvery until ctx
// ends, beside the delivery loop (a commit's round trip does not hold up
// the records behind it).
func (g *group) commitLoop(ctx context.Context) {
	defer g.running.Done()
	t := time.NewTicker(commitEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.commit(ctx)
	}
}

// run hands the group's records to the members until ctx ends.
func (g *group) run(ctx context.Context) {
	defer g.running.Done()
	for ctx.Err() == nil {
		g.redeliver(ctx)
		// Until records come, ctx ends, or a delivery is handed back.
		fetches := g.client.PollRecords(g.pollContext(ctx), 512)
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				g.m.log.Debug("share group fetch", "group", g.key, "topic", t, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, rec := range p.Records {
				if !g.deliver(ctx, rec, nil) {
					return
				}
			}
			if n := len(p.Records); n > 0 {
				g.setLag(tp{p.Topic, p.Partition}, p.HighWatermark-p.Records[n-1].Offset-1)
			}
		})
		g.client.AllowRebalance()
	}
}

// redeliver hands what members that went owed to the others.
func (g *group) redeliver(ctx context.Context) {
	for _, d := range g.takeBack() {
		if !g.deliver(ctx, d.rec, d) {
			return
		}
	}
}

// memberWait bounds one wait for a member with room (the loop looks again).
const memberWait = 100 * time.Millisecond

// deliver hands rec to one member (again: the delivery a member that went
// owed); false: ctx ended first.
func (g *group) deliver(ctx context.Context, rec *kgo.Record, again *delivery) bool {
	part := g.partition(rec)
	if part == nil {
		return true // revoked meanwhile: its new owner reads it from the commit
	}
	if again == nil && rec.Attrs.IsControl() {
		g.handedOut(part, rec, false)
		return true
	}
	cv := g.conv.Convert(rec, "")
	if cv.Skip == "" && !topicmap.MatchFilter(g.filter, cv.Packet.TopicName) {
		cv.Skip = "not_matched" // a reverse topic's record for other subscriptions
	}
	if cv.Skip != "" {
		if again == nil {
			g.handedOut(part, rec, false)
		}
		return true
	}
	var denied map[string]bool // members whose read ACL refuses the topic
	for ctx.Err() == nil {
		cl, sub, ok := g.pick(denied)
		if !ok && len(denied) > 0 && g.allOf(denied) {
			// No member may read it: nobody is owed it (as a plain
			// subscriber whose ACL denies a topic is not).
			if again == nil {
				g.handedOut(part, rec, false)
			} else {
				g.settle(again)
			}
			return true
		}
		if !ok {
			select {
			case <-ctx.Done():
			case <-g.wake:
			case <-time.After(memberWait):
			}
			continue
		}
		d := again
		if d == nil {
			d = &delivery{g: g, rec: rec, part: part}
			// Owed before it is sent: its acknowledgement may come before
			// publish returns.
			g.owe(part, rec.Offset, true)
		}
		out, err := g.m.publish(cl, sub, cv.Packet, d)
		if err != nil && again == nil {
			g.owe(part, rec.Offset, false)
		}
		if errors.Is(err, packets.ErrNotAuthorized) {
			if denied == nil {
				denied = map[string]bool{}
			}
			denied[cl.ID] = true
			continue
		}
		if err != nil {
			g.full(cl.ID)
			continue
		}
		g.delivered.Inc()
		if again != nil {
			g.redelivered.Inc()
		}
		switch {
		case out.FixedHeader.Qos > 0 && again == nil:
			g.handedOut(part, rec, false) // owed already, unless acknowledged meanwhile
		case out.FixedHeader.Qos > 0: // owed again, by its new member
		case again == nil:
			g.owe(part, rec.Offset, false) // QoS 0: done once queued
			g.handedOut(part, rec, false)
		default:
			g.settle(again)
		}
		return true
	}
	return false
}

// pick returns the live member with the fewest deliveries owed, under
// MaxInflight and not denied, and its subscription.
func (g *group) pick(denied map[string]bool) (*mqtt.Client, packets.Subscription, bool) {
	var gone map[string]bool // members seen gone meanwhile, or unsubscribed
	for {
		id, ok := g.leastLoaded(g.m.cfg.MaxInflight, denied, gone)
		if !ok {
			return nil, packets.Subscription{}, false
		}
		if cl, ok := g.m.d.Server.Clients.Get(id); ok && !cl.Closed() {
			if sub, ok := cl.State.Subscriptions.Get(g.key); ok {
				return cl, sub, true
			}
		}
		if gone == nil {
			gone = map[string]bool{}
		}
		gone[id] = true
	}
}

// commit commits, per partition, the lowest offset still owed.
func (g *group) commit(ctx context.Context) {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.commitLocked(ctx)
}

// commitLocked is commit under commitMu.
func (g *group) commitLocked(ctx context.Context) {
	offsets := g.committable()
	if len(offsets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var failed error
	g.client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					failed = errors.New("commit refused")
				}
			}
		}
	})
	if failed != nil {
		g.m.log.Debug("share group commit", "group", g.key, "err", failed)
		return
	}
	g.committed(offsets)
}

// assigned, revoked and lost are kgo's rebalance callbacks.
func (g *group) assigned(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	g.assign(parts)
	g.m.d.Metrics.Partitions.WithLabelValues(g.key).Set(float64(g.partitions()))
}

func (g *group) revoked(ctx context.Context, _ *kgo.Client, parts map[string][]int32) {
	g.commitMu.Lock()
	g.commitLocked(ctx)
	g.revoke(parts)
	g.commitMu.Unlock()
	g.m.d.Metrics.Partitions.WithLabelValues(g.key).Set(float64(g.partitions()))
}

func (g *group) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	g.commitMu.Lock()
	g.revoke(parts)
	g.commitMu.Unlock()
	g.m.d.Metrics.Partitions.WithLabelValues(g.key).Set(float64(g.partitions()))
}
