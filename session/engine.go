package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// ErrKafkaUnavailable: the state in Kafka could not be read or written in
// time. A connection refused or stopped for it, and a retained write that
// failed, end with an error wrapping it.
var ErrKafkaUnavailable = errors.New("kafka unavailable")

// Config is the engine's configuration: the caller maps its own keys into
// it (bridge: state.*, kafka.*, instance.id) and validates them.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// InstanceID names this instance: the owner of the sessions it claims
	// (instance.id).
	InstanceID string
	// Started is when this run started: a record of this instance claimed
	// before it, still marked connected, is a dead run's (wills).
	Started time.Time
	// SessionsTopic and RetainedTopic are the state tables' topics
	// (state.sessions_topic, state.retained_topic).
	SessionsTopic, RetainedTopic string
	// Partitions and ReplicationFactor are those of the state topics when
	// the engine creates them.
	Partitions        int32
	ReplicationFactor int16
	// WriteTimeout bounds one table write and a CONNECT's read of the
	// sessions table (kafka.ack_timeout); it is also how long WaitLoaded
	// waits for the tables.
	WriteTimeout time.Duration
	// ConnectTimeout bounds a CONNECT's work in Kafka: the sessions
	// table read to its end, the session's record read and its claim
	// written (state.connect_timeout; 0: WriteTimeout). Past it the
	// CONNECT is refused with Server unavailable. In a reconnect storm
	// Kafka is slow, not gone: a refused client comes back and costs the
	// same work again, so this is longer than one publish's wait.
	ConnectTimeout time.Duration
	// InstanceLapse is how long an instance may go unheard before its
	// clients' Wills are published (state.instance_lapse).
	InstanceLapse time.Duration
	// ReadUncommitted makes the replays read the records of open and
	// aborted Kafka transactions too (kafka.isolation_level
	// read_uncommitted); by default they read committed records only, to
	// the last stable offset.
	ReadUncommitted bool
	// MaxQueued caps the new messages a resume's first pass delivers
	// (state.max_queued; 0: no cap).
	MaxQueued int
	// ReplaySlots is how many replays run at once (0: MaxReplays).
	ReplaySlots int
	// SessionOwner binds a session to its user: a CONNECT of another
	// user with its client id is refused Not authorized while the session
	// lives (mqtt.session_owner).
	SessionOwner bool
	// MaxSessions and MaxSessionsPerUser cap the persistent sessions in
	// the sessions table, in total and of one username: a CONNECT that
	// would make one more is refused Quota exceeded (0: no cap;
	// mqtt.max_sessions, mqtt.max_sessions_per_user).
	MaxSessions, MaxSessionsPerUser int
	// ReverseGroup is the reverse consumer's group when it is this
	// instance's own (its committed offsets say where the reverse path
	// started: the horizon); "" when the group is shared or there is no
	// reverse path.
	ReverseGroup string
}

// ReadCheck reports whether cl's user may subscribe to a filter or
// receive a message of a topic (the MQTT ACL).
type ReadCheck func(cl *mqtt.Client, topic string) bool

// WriteCheck reports whether cl's user may publish to a topic (the MQTT
// ACL's publish check, the one mochi makes of a PUBLISH and a Will).
type WriteCheck func(cl *mqtt.Client, topic string) bool

// Deliverer is what the engine needs from the side of the broker that
// delivers (bridge: its forward hook and its redelivery order hook).
type Deliverer interface {
	// Subscribed tells that cl receives deliveries from now on (a resumed
	// session, whose replay starts): acknowledgements of its own publishes
	// must then keep their order with those deliveries.
	Subscribed(cl *mqtt.Client)
	// PutInFlight: a replay put the delivery under packet id pid in cl's
	// in-flight store itself (mochi reports it to no hook): it takes its
	// place in the redelivery order after what is in flight already.
	PutInFlight(cl *mqtt.Client, pid uint16)
	// TakenOutOfFlight: the delivery under pid left cl's in-flight store
	// without an acknowledgement (a resume's new user may not read it).
	TakenOutOfFlight(cl *mqtt.Client, pid uint16)
	// PublishWill publishes the Will of a client of a dead instance the
	// way mochi publishes one: to Kafka, to the retained table if flagged,
	// and to this broker's subscribers, with the client as the origin.
	PublishWill(client string, protocol byte, w mqtt.Will)
}

// Heartbeat is what the engine reads of another instance's heartbeat.
type Heartbeat struct {
	// Stopped marks an instance's last heartbeat of a graceful stop.
	Stopped bool
	// SessionsTopic is the instance's sessions topic: the instances that
	// share it (one cluster) choose among themselves who publishes a dead
	// member's Wills ("" from a version that does not say).
	SessionsTopic string
}

// Deps are what the engine runs with besides its configuration.
type Deps struct {
	Log *slog.Logger
	// Registerer receives the engine's metrics.
	Registerer prometheus.Registerer
	// Server is the broker the engine's hook is added to (Engine.Hook).
	Server *mqtt.Server
	// Topics maps Kafka records back to MQTT messages (a replay's).
	Topics *topicmap.Map
	// KafkaOpts are options every Kafka client of the engine gets (TLS,
	// SASL); the seed brokers come from Config.Brokers.
	KafkaOpts []kgo.Opt
	// IsReverse reports whether the reverse path consumes a Kafka topic
	// (reverse.topics); nil: there is no reverse path.
	IsReverse func(kafkaTopic string) bool
	// OnDemand: the caller reads on demand the topics its live
	// subscriptions can draw from (reverse.on_demand), and reports which
	// through ReverseProgress.Demand.
	OnDemand bool
	// MayRead is the ACL's read check (nil: everyone may read everything).
	MayRead ReadCheck
	// MayWrite is the ACL's publish check (nil: everyone may publish
	// everything): a dead instance's client's Will is checked with it.
	MayWrite WriteCheck
	// Deliverer is the caller's side of deliveries.
	Deliverer Deliverer
	// QueueDrops counts the messages a resume did not deliver beyond
	// Config.MaxQueued.
	QueueDrops prometheus.Counter
}

// Engine is one instance's session engine: the sessions and retained
// tables, the mochi hook that keeps sessions in them, the replays of
// resumed sessions, the Wills of dead instances' clients and the reverse
// path's horizon.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	hook     *sessionHook
	retained *Retained
	wills    *willKeeper
	sessions *state.Table
	admins   []*kgo.Client
	// demandTopics lists the topics for DemandTopics.
	demandTopics *topicLister
	stop         chan struct{}
	done         chan struct{} // checkpoints and the horizon ended
	wdone        chan struct{} // the Wills ended
}

// Open opens the Kafka-backed broker state (package state): the retained
// table, read into the broker's retained index, and the sessions table,
// attached to the broker by the engine's hook (not added yet: Hook). Both
// start reading at once; WaitLoaded waits for them. Open starts the
// checkpoints, the Wills and the horizon; Close stops them. On an error,
// what was opened is closed again by Close.
func Open(cfg Config, d Deps) (*Engine, error) {
	e := &Engine{cfg: cfg, log: d.Log}
	sm, err := newStateMetrics(d.Registerer)
	if err != nil {
		return e, err
	}
	connectTimeout := cfg.ConnectTimeout
	if connectTimeout <= 0 {
		connectTimeout = cfg.WriteTimeout
	}
	tc := func(topic string) state.TableConfig {
		// A claim may wait in the client as long as its CONNECT does;
		// every other write's own context is WriteTimeout.
		return state.TableConfig{Brokers: cfg.Brokers, Topic: topic, Partitions: cfg.Partitions,
			ReplicationFactor: cfg.ReplicationFactor, WriteTimeout: max(cfg.WriteTimeout, connectTimeout), Opts: d.KafkaOpts}
	}
	e.retained = newRetained(d.Log, d.Server, sm)
	if e.retained.table, err = state.Open(tc(cfg.RetainedTopic), d.Log, e.retained.onChange); err != nil {
		return e, fmt.Errorf("retained messages: %w", err)
	}
	// The hook is complete before the table's reader starts calling it;
	// its table is set before any client can connect.
	hook := newSessionHook(d.Log, d.Server, nil, cfg.InstanceID, cfg.WriteTimeout, sm)
	hook.connectTimeout = connectTimeout
	hook.inj = new(Injections)
	hook.canRead = d.MayRead
	if cfg.SessionOwner || cfg.MaxSessions > 0 || cfg.MaxSessionsPerUser > 0 {
		// The persistent sessions in the table: its reader counts them
		// (sessionTag); hook.table is set before any client connects.
		total := func() int { return hook.table.Count(tagOnline) + hook.table.Count(tagOffline) }
		hook.admit = newAdmission(cfg.SessionOwner, cfg.MaxSessions, cfg.MaxSessionsPerUser, total)
	}
	hook.deliverer = d.Deliverer
	isReverse := d.IsReverse
	if isReverse == nil {
		isReverse = func(string) bool { return false }
	}
	// Always: topics read on demand (ReverseProgress.Demand) are consumed
	// too.
	hook.reverse = newReverseProgress(isReverse, d.OnDemand)
	// One client lists the cluster's topics and the offsets and fetches
	// the records of every replay (reads.go), and watches the horizon.
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, d.KafkaOpts...)...)
	if err != nil {
		return e, fmt.Errorf("replay client: %w", err)
	}
	// The topic listings get a client of their own: a listing of every
	// topic of a big cluster does not wait behind the replays' offset
	// requests, nor they behind it.
	lister, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, d.KafkaOpts...)...)
	if err != nil {
		admin.Close()
		return e, fmt.Errorf("topic listing client: %w", err)
	}
	e.admins = append(e.admins, admin, lister)
	// Reading on demand lists the topics on its own (every demandEvery):
	// the replays' last passes wait for a listing of theirs, never behind
	// one of these.
	e.demandTopics = newTopicLister(lister)
	e.demandTopics.maxAge = demandListAge
	adm := kadm.NewClient(admin)
	e.stop = make(chan struct{})
	slots := MaxReplays
	if cfg.ReplaySlots > 0 {
		slots = cfg.ReplaySlots
	}
	hook.replays = &replayer{h: hook, log: d.Log.With("component", "replay"), tm: d.Topics,
		reads: newReads(admin, !cfg.ReadUncommitted), topics: newTopicLister(lister),
		isReverse: isReverse, slots: make(chan struct{}, slots), metrics: sm, stop: e.stop,
		closes: closeWatch{stop: e.stop}, maxQueued: cfg.MaxQueued, queueDrops: d.QueueDrops}
	if dl := d.Log.With("component", "replay"); dl.Enabled(context.Background(), slog.LevelDebug) {
		hook.replays.topics.onList = func(d time.Duration, n int) { dl.Debug("topic listing", "took", d, "topics", n) }
	}
	// Wills of dead instances' clients (wills.go): liveness from the
	// heartbeats the caller reads (Beat); it sees every session record
	// (hook.onChange) from the first.
	e.wills = newWillKeeper(d.Log, cfg.InstanceID, cfg.SessionsTopic, cfg.Started, cfg.InstanceLapse, cfg.WriteTimeout, sm, e.stop)
	if d.Deliverer != nil {
		e.wills.publish = d.Deliverer.PublishWill
	}
	e.wills.mayWrite = d.MayWrite
	e.wills.owns, e.wills.maxExpiry = hook.owns, d.Server.Options.Capabilities.MaximumSessionExpiryInterval
	hook.wills = e.wills
	sessions := tc(cfg.SessionsTopic)
	sessions.Tag = sessionTag
	// Only the records of sessions connected here stay in memory; the
	// others (offline, or served elsewhere: most of a fleet's, on every
	// instance) are read from Kafka when a client resumes one.
	sessions.Keep = servedHere(cfg.InstanceID)
	sessions.Fetch = hook.replays.reads.record(cfg.SessionsTopic)
	if e.sessions, err = state.Open(sessions, d.Log, hook.onChange); err != nil {
		return e, fmt.Errorf("sessions: %w", err)
	}
	hook.table = e.sessions
	e.hook = hook
	e.done = make(chan struct{})
	var horizon *horizonWatch
	if d.IsReverse != nil {
		horizon = &horizonWatch{progress: hook.reverse, admin: adm, listEnds: hook.replays.reads.listEnds, topics: hook.replays.topics,
			log: d.Log.With("component", "replay"), group: cfg.ReverseGroup}
	}
	go func() {
		defer close(e.done)
		var wg sync.WaitGroup
		if horizon != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				horizon.run(e.stop)
			}()
		}
		hook.checkpoints(e.stop)
		wg.Wait()
	}()
	e.wills.table = e.sessions
	e.wdone = make(chan struct{})
	go func() {
		defer close(e.wdone)
		e.wills.run()
		e.wills.wait()
	}()
	if err := registerSessionGauges(d.Registerer, e.sessions); err != nil {
		return e, err
	}
	return e, nil
}

// WaitLoaded waits a while for both tables to load, so that the first
// clients find their sessions and retained messages; past
// Config.WriteTimeout it returns anyway, with a warning (clean sessions
// work, a persistent resume is refused until the load is done). Only
// ctx's end is an error.
func (e *Engine) WaitLoaded(ctx context.Context) error {
	wait := time.NewTimer(e.cfg.WriteTimeout)
	defer wait.Stop()
	for _, t := range []*state.Table{e.retained.table, e.sessions} {
		select {
		case <-t.Loaded():
		case <-wait.C:
			e.log.Warn("broker state not loaded from Kafka yet: persistent sessions are refused (Server unavailable) until it is",
				"sessions_topic", e.cfg.SessionsTopic, "retained_topic", e.cfg.RetainedTopic)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.log.Info("broker state in Kafka", "sessions_topic", e.cfg.SessionsTopic, "sessions", e.sessions.Len(),
		"retained_topic", e.cfg.RetainedTopic, "retained", e.retained.table.Len())
	return nil
}

// Hook is the mochi hook that keeps the sessions; the caller adds it to
// the broker (before its redelivery order hook: mochi calls hooks in the
// order they were added).
func (e *Engine) Hook() mqtt.Hook { return e.hook }

// Injections is where the caller's injections into the broker register
// their Kafka coordinates (Injections.Begin).
func (e *Engine) Injections() *Injections { return e.hook.inj }

// ReverseProgress is where the reverse path (reverse.topics, and the
// topics read on demand) reports what it handed out, and the forward path
// its own records awaiting local delivery.
func (e *Engine) ReverseProgress() *ReverseProgress { return e.hook.reverse }

// Retained is the retained table, for the caller's retained publishes.
func (e *Engine) Retained() *Retained { return e.retained }

// Beat hands the engine a heartbeat read from the instances topic (own:
// this run's own heartbeat read back): the liveness the Wills of dead
// instances' clients are published by.
func (e *Engine) Beat(id string, hb Heartbeat, own bool) { e.wills.beat(id, hb, own) }

// Flush waits until the session writes started so far are acknowledged
// by Kafka (or fail); at stop, after the broker closed its connections.
func (e *Engine) Flush(ctx context.Context) error {
	if e.sessions == nil {
		return nil
	}
	return e.sessions.Flush(ctx)
}

// Close stops the checkpoints, the Wills and the horizon, and closes the
// tables (after the broker: its last session writes go first).
func (e *Engine) Close() {
	if e.done != nil {
		close(e.stop)
		<-e.done
		if e.wdone != nil {
			<-e.wdone
		}
	}
	for _, cl := range e.admins {
		cl.Close()
	}
	if e.sessions != nil {
		e.sessions.Close()
	}
	if e.retained != nil && e.retained.table != nil {
		e.retained.table.Close()
	}
}

// Lookup returns the record this instance has read of client's session
// (nil: none, or ended).
func (e *Engine) Lookup(client string) *state.Session {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _ := e.hook.lookup(ctx, client)
	return rec
}

// Owned is how many sessions this instance holds an object for: those of
// its connected clients (an offline one is its record). For tests and
// benchmarks.
func (e *Engine) Owned() int {
	e.hook.mu.Lock()
	defer e.hook.mu.Unlock()
	return len(e.hook.owned)
}

// ReverseLimit is the offset a position of partition part of Kafka topic
// topic may not pass (ReverseProgress): applies is false when the reverse
// path does not consume the topic, known is false when it has handed out
// nothing of the partition yet.
func (e *Engine) ReverseLimit(topic string, part int32) (next int64, applies, known bool) {
	return e.hook.reverse.limit(tp{topic, part})
}

// ReverseHorizon is the reverse path's horizon (unix ms): every record of
// every consumed partition with an older timestamp has been handed out (0:
// not known yet).
func (e *Engine) ReverseHorizon() int64 { return e.hook.reverse.currentHorizon() }

// SetBeforeWrite makes f see each session record before it is written
// (tests: a write held back to land late).
func (e *Engine) SetBeforeWrite(f func(*state.Session)) {
	e.hook.mu.Lock()
	e.hook.beforeWrite = f
	e.hook.mu.Unlock()
}

// SetAfterLookup makes f run in each CONNECT between the read of its
// client id's record and the claim (tests: a record of the id read at that
// moment).
func (e *Engine) SetAfterLookup(f func(id string)) {
	e.hook.mu.Lock()
	e.hook.afterLookup = f
	e.hook.mu.Unlock()
}

// ShareTopicListing replaces the topic listing the replays share with
// names, as if requested at at (tests: a listing that lacks a topic).
func (e *Engine) ShareTopicListing(names []string, at time.Time) {
	l := e.hook.replays.topics
	l.mu.Lock()
	l.names, l.at = names, at
	l.mu.Unlock()
}

// TopicListing returns a topic listing the replays share, requested at or
// after t.
func (e *Engine) TopicListing(ctx context.Context, t time.Time) ([]string, error) {
	return e.hook.replays.topics.since(ctx, t)
}
