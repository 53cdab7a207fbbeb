package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/state"
)

// openState opens the Kafka-backed broker state (package state): the
// sessions table, attached to the broker by sessionHook, and the retained
// table, read into the broker's retained index by retainedState. Both are
// read to their end before the listeners open.
func (b *Bridge) openState(ctx context.Context, brokers []string) error {
	sm, err := newStateMetrics(b.reg)
	if err != nil {
		return err
	}
	sec, err := kgoSecurityOpts(b.cfg.Kafka)
	if err != nil {
		return err
	}
	rf := int16(b.cfg.Kafka.ReplicationFactor)
	if b.embedded != nil {
		rf = 1 // the embedded Kafka is one broker, in memory
	}
	tc := func(topic string) state.TableConfig {
		return state.TableConfig{Brokers: brokers, Topic: topic, Partitions: int32(b.cfg.State.Partitions),
			ReplicationFactor: rf, WriteTimeout: b.cfg.Kafka.AckTimeout, Opts: sec}
	}
	b.retained = newRetainedState(b.log, b.server, sm)
	if b.retained.table, err = state.Open(tc(b.cfg.State.RetainedTopic), b.log, b.retained.onChange); err != nil {
		return fmt.Errorf("retained messages: %w", err)
	}
	// The hook is complete before the table's reader starts calling it;
	// its table is set before any client can connect.
	hook := newSessionHook(b.log, b.server, nil, b.cfg.Instance.ID, b.cfg.Kafka.AckTimeout, sm)
	hook.inj = new(injections)
	hook.canRead = b.canRead
	isReverse := reverseTopicMatcher(b.cfg.Reverse.Topics)
	if len(b.cfg.Reverse.Topics) > 0 {
		hook.reverse = newReverseProgress(isReverse)
	}
	var admins []*kadm.Client
	for range replayAdmins {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, sec...)...)
		if err != nil {
			return fmt.Errorf("replay admin client: %w", err)
		}
		b.stateAdmins = append(b.stateAdmins, cl)
		admins = append(admins, kadm.NewClient(cl))
	}
	b.stateStop = make(chan struct{})
	slots := maxReplays
	if b.replaySlots > 0 {
		slots = b.replaySlots
	}
	hook.replays = &replayer{h: hook, log: b.log.With("component", "replay"), tm: b.tm,
		opts: append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, sec...), admins: admins,
		topics:    newTopicLister(admins[0]),
		isReverse: isReverse, slots: make(chan struct{}, slots), metrics: sm, stop: b.stateStop,
		maxQueued: b.cfg.State.MaxQueued, queueDrops: b.metrics.drops.WithLabelValues("session_queue_full")}
	// Wills of dead instances' clients (wills.go): liveness from the
	// heartbeats the instance check reads; it sees every session record
	// (hook.onChange) from the first.
	b.wills = newWillKeeper(b.log, b.cfg.Instance.ID, b.cfg.State.SessionsTopic, b.instance.start, b.cfg.State.InstanceLapse, b.cfg.Kafka.AckTimeout, sm, b.stateStop)
	b.wills.publish = b.hook.publishWill
	b.wills.holds, b.wills.maxExpiry = hook.holds, b.server.Options.Capabilities.MaximumSessionExpiryInterval
	hook.wills = b.wills
	if b.sessions, err = state.Open(tc(b.cfg.State.SessionsTopic), b.log, hook.onChange); err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	hook.table = b.sessions
	b.sessionHook = hook
	b.stateDone = make(chan struct{})
	var horizon *horizonWatch
	if hook.reverse != nil {
		horizon = &horizonWatch{progress: hook.reverse, admin: admins[0], topics: hook.replays.topics,
			log: b.log.With("component", "replay")}
		if b.cfg.Reverse.GroupID == "" {
			horizon.group = reverseGroupID(b.cfg)
		}
	}
	go func() {
		defer close(b.stateDone)
		var wg sync.WaitGroup
		if horizon != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				horizon.run(b.stateStop)
			}()
		}
		hook.checkpoints(b.stateStop)
		wg.Wait()
	}()
	b.wills.table = b.sessions
	b.instance.setBeats(b.wills.beat)
	b.willsDone = make(chan struct{})
	go func() {
		defer close(b.willsDone)
		b.wills.run()
		b.wills.wait()
	}()
	if err := registerSessionGauges(b.reg, b.sessions); err != nil {
		return err
	}
	// Wait a while for both to load, so that the first clients find their
	// sessions and retained messages; past that the listeners open anyway
	// (clean sessions work, a persistent resume waits for the load).
	wait := time.NewTimer(b.cfg.Kafka.AckTimeout)
	defer wait.Stop()
	for _, t := range []*state.Table{b.retained.table, b.sessions} {
		select {
		case <-t.Loaded():
		case <-wait.C:
			b.log.Warn("broker state not loaded from Kafka yet: persistent sessions are refused (Server unavailable) until it is",
				"sessions_topic", b.cfg.State.SessionsTopic, "retained_topic", b.cfg.State.RetainedTopic)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.log.Info("broker state in Kafka", "sessions_topic", b.cfg.State.SessionsTopic, "sessions", b.sessions.Len(),
		"retained_topic", b.cfg.State.RetainedTopic, "retained", b.retained.table.Len())
	return nil
}

// closeState closes the state tables (after the broker: its last session
// writes go first).
func (b *Bridge) closeState() {
	if b.stateStop != nil {
		close(b.stateStop)
		<-b.stateDone
		if b.willsDone != nil {
			<-b.willsDone
		}
	}
	for _, cl := range b.stateAdmins {
		cl.Close()
	}
	if b.sessions != nil {
		b.sessions.Close()
	}
	if b.retained != nil && b.retained.table != nil {
		b.retained.table.Close()
	}
}

// addSessionHooks adds the hooks that keep MQTT sessions: the session hook
// (state in Kafka, positions, replay) and inflightOrder (redelivery order).
func (b *Bridge) addSessionHooks() error {
	if err := b.server.AddHook(b.sessionHook, nil); err != nil {
		return fmt.Errorf("session hook: %w", err)
	}
	b.order = newInflightOrder(b.server)
	if err := b.server.AddHook(b.order, nil); err != nil {
		return fmt.Errorf("inflight order hook: %w", err)
	}
	if r := b.sessionHook.replays; r != nil {
		r.order = b.order
	}
	return nil
}
