// Package instance is one Ferry instance's presence in its cluster: a
// small heartbeat appended every state.heartbeat_interval to the Kafka
// topic _ferry_instances (Topic) and read back, every instance reading
// every heartbeat.
//
// The contract: Check.Run announces this run (a nonce, the host, pid,
// start time and state.sessions_topic, completed by SetDescribe) until
// Close, whose last heartbeat says the instance stopped; every heartbeat
// read, its own included, is handed to the function given to SetBeats (the
// session engine's liveness of the Wills of dead instances' clients, the
// admin API's instance list). From those it detects another live process
// with the same instance.id (Status, for /readyz, and the gauge
// ferry_instance_id_duplicate). No clock of another host is compared. A
// heartbeat is best effort: a Kafka that does not answer never holds a
// stop. When Kafka refuses the topic the check is off, and that is logged.
//
// CreateControlTopic creates Ferry's small control topics (this one and
// the admin API's) the same way. The package knows nothing of MQTT.
package instance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkaclient"
	"github.com/ferry-bridge/ferry/producer"
)

// Topic is the Ferry-owned Kafka topic that carries the instance
// heartbeats.
const Topic = "_ferry_instances"

const (
	// DefaultInterval is how often an instance announces itself, unless
	// Config.Interval says otherwise.
	DefaultInterval = 2 * time.Second
	// StaleBeats: a duplicate not heard from for this many heartbeat
	// intervals is gone, and the instance is ready again.
	StaleBeats = 4
	// finalWait bounds the write of the last heartbeat (stopped) at a
	// graceful stop.
	finalWait = time.Second
	// Lookback: the heartbeats are read from this long before the start,
	// so that a broker clock behind this host's does not hide the
	// instance's own first heartbeat.
	Lookback = time.Minute
	// logEvery rate-limits the duplicate error.
	logEvery = 30 * time.Second
)

// Config is what the check is configured with.
type Config struct {
	ID string // instance.id
	// SessionsTopic is state.sessions_topic, in the heartbeat: several
	// clusters may share one Kafka.
	SessionsTopic string
	// Interval is state.heartbeat_interval (0: DefaultInterval).
	Interval time.Duration
	// ReplicationFactor is kafka.replication_factor, for Topic's creation.
	ReplicationFactor int
	Brokers           []string
}

// Deps are what the check runs with besides its configuration.
type Deps struct {
	Log *slog.Logger
	// Registerer receives ferry_instance_id_duplicate.
	Registerer prometheus.Registerer
	// Client creates Topic (kafka-go).
	Client *kafka.Client
	// KafkaOpts are the options of the check's franz-go client (TLS,
	// SASL); the seed brokers come from Config.Brokers.
	KafkaOpts []kgo.Opt
}

// Check detects another running process with the same instance.id
// (which would silently skip this one's records as its own and share its
// reverse consumer group).
//
// Every instance appends a small heartbeat to Topic every interval: key =
// instance.id, value = a random nonce of this run with the host, pid and
// start time. It reads the topic back (no consumer group). Heartbeats of one id share a key, hence a partition, hence an
// order: once the instance has read its own first heartbeat, any later
// heartbeat of its id with another nonce was appended while this run was
// alive, by another live process. No clock is compared, and a kill -9 and
// restart never trips it: the dead process appends nothing after it died,
// which was before the new run's first heartbeat. Both duplicates see each
// other. While a duplicate is heard from, /readyz answers 503 with the
// reason, an error is logged (every logEvery) and
// ferry_instance_id_duplicate is 1.
//
// When the topic cannot be created or written (no permission), the check is
// off, and that is logged.
type Check struct {
	id          string
	nonce       string
	log         *slog.Logger
	client      *kafka.Client
	replication int
	opts        []kgo.Opt
	gauge       prometheus.Gauge
	start       time.Time
	every       time.Duration
	sessions    string // state.sessions_topic, in the heartbeat
	// beats, once set (SetBeats), sees every heartbeat read (reader
	// goroutine): own is true for this run's own.
	beats atomic.Pointer[func(id string, hb Heartbeat, own bool)]
	// describe, once set (SetDescribe), adds the instance's addresses
	// and client count to each heartbeat (announcer goroutine).
	describe atomic.Pointer[func(*Heartbeat)]

	mu        sync.Mutex
	armed     bool // own first heartbeat read back
	dupSeen   time.Time
	dupDetail string

	stop     chan struct{}
	stopOnce sync.Once
	running  atomic.Bool
	done     chan struct{}
}

// Heartbeat is the value of a Topic record.
type Heartbeat struct {
	Nonce   string    `json:"nonce"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Stopped marks the last heartbeat of a graceful stop, written after
	// the broker closed its connections: the instance is gone at once.
	Stopped bool `json:"stopped,omitempty"`
	// Sessions is the instance's state.sessions_topic: the instances that
	// share it (one cluster) choose among themselves who publishes a dead
	// member's Wills; several clusters may share one Kafka.
	Sessions string `json:"sessions,omitempty"`
	// What the admin API shows of a live instance.
	HTTP    string            `json:"http,omitempty"`
	MQTT    map[string]string `json:"mqtt,omitempty"`
	Clients int               `json:"clients,omitempty"`
	Version string            `json:"version,omitempty"`
}

// New builds the check; Run starts it.
func New(cfg Config, d Deps) (*Check, error) {
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("instance nonce: %w", err)
	}
	every := cfg.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	c := &Check{
		every: every, sessions: cfg.SessionsTopic,
		id: cfg.ID, nonce: hex.EncodeToString(nonce), log: d.Log.With("component", "instance-check"),
		client: d.Client, replication: cfg.ReplicationFactor, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_instance_id_duplicate",
			Help: "1 while another running process uses this instance.id (see /readyz)."}),
	}
	if err := d.Registerer.Register(c.gauge); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	c.opts = append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("ferry-" + cfg.ID + "-instance"),
		kgo.ConsumeTopics(Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(c.start.Add(-Lookback).UnixMilli())),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(max(every, finalWait)),
		kgo.WithLogger(kafkaclient.KgoLogger{Logger: c.log}),
	}, d.KafkaOpts...)
	return c, nil
}

// Run announces and watches until ctx ends or Close is called.
func (c *Check) Run(ctx context.Context) {
	if !c.running.CompareAndSwap(false, true) {
		return
	}
	defer close(c.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if !c.ensureTopic(ctx) {
		return
	}
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		c.log.Warn("duplicate instance.id check is OFF: cannot build a Kafka client", "err", err)
		return
	}
	defer cl.Close()
	var announcer sync.WaitGroup
	announcer.Add(1)
	go func() {
		defer announcer.Done()
		c.announce(ctx, cl)
	}()
	defer announcer.Wait() // before cl.Close
	var lastLog time.Time
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachRecord(c.observe)
		if err := fetches.Err(); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			c.log.Debug("reading heartbeats", "err", err)
			select { // do not spin on a persistent error
			case <-ctx.Done():
			case <-time.After(c.every):
			}
		}
		if dup, why := c.duplicate(); dup {
			c.gauge.Set(1)
			if time.Since(lastLog) >= logEvery {
				lastLog = time.Now()
				c.log.Error("another running Ferry process uses this instance.id: each skips the other's records as its own and they share a consumer group; give every instance its own instance.id",
					"instance", c.id, "other", why)
			}
		} else {
			c.gauge.Set(0)
		}
	}
}

// ensureTopic creates Topic when missing: one partition (every
// heartbeat of an id must share one order), LogAppendTime like every topic
// Ferry creates, and an hour of retention (segments roll hourly) so that
// heartbeats do not pile up. It is not counted against
// kafka.max_created_topics. It reports false (and logs that the check is
// off) when Kafka refuses.
func (c *Check) ensureTopic(ctx context.Context) bool {
	for ctx.Err() == nil {
		err := c.createTopic(ctx)
		if err == nil {
			return true
		}
		if errors.Is(err, producer.ErrTopicRejected) {
			c.log.Warn("duplicate instance.id check is OFF: cannot create or use the Kafka topic "+Topic, "err", err)
			return false
		}
		c.log.Debug("creating "+Topic, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return false
}

func (c *Check) createTopic(ctx context.Context) error {
	return CreateControlTopic(ctx, c.client, Topic, c.replication)
}

// CreateControlTopic creates one of Ferry's small control topics (Topic,
// the admin API's _ferry_admin) when missing: one partition (its records
// share one order), LogAppendTime like every topic Ferry creates, and an
// hour of retention (segments roll hourly) so that they do not pile up.
// An error wraps producer.ErrTopicRejected when Kafka refuses for good.
func CreateControlTopic(ctx context.Context, client *kafka.Client, topic string, replication int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: replication,
		ConfigEntries: []kafka.ConfigEntry{
			{ConfigName: "message.timestamp.type", ConfigValue: "LogAppendTime"},
			{ConfigName: "retention.ms", ConfigValue: "3600000"},
			{ConfigName: "segment.ms", ConfigValue: "3600000"},
		},
	}}})
	if err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	terr := res.Errors[topic]
	switch {
	case terr == nil || errors.Is(terr, kafka.TopicAlreadyExists):
		return nil
	case errors.Is(terr, kafka.TopicAuthorizationFailed), errors.Is(terr, kafka.ClusterAuthorizationFailed):
		// No right to create: fine if it exists (created by someone else).
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err == nil && len(md.Topics) == 1 && md.Topics[0].Error == nil && len(md.Topics[0].Partitions) > 0 {
			return nil
		}
		return fmt.Errorf("%w: create %q: %v", producer.ErrTopicRejected, topic, terr)
	case errors.Is(terr, kafka.InvalidReplicationFactor), errors.Is(terr, kafka.PolicyViolation),
		errors.Is(terr, kafka.InvalidConfiguration), errors.Is(terr, kafka.InvalidTopic):
		return fmt.Errorf("%w: create %q: %v", producer.ErrTopicRejected, topic, terr)
	}
	return fmt.Errorf("create topic %q: %w", topic, terr)
}

// announce appends a heartbeat now and every interval.
func (c *Check) announce(ctx context.Context, cl *kgo.Client) {
	host, _ := os.Hostname()
	t := time.NewTicker(c.every)
	defer t.Stop()
	defer c.final(cl)
	warned := false
	for {
		// Not ProduceSync: a record already in a produce request is not
		// failed by its context, and against a Kafka that stopped answering
		// it would hold the shutdown for kgo's request timeout. On stop the
		// heartbeat is abandoned; Run's cl.Close fails it.
		hb := Heartbeat{Nonce: c.nonce, Host: host, PID: os.Getpid(), Started: c.start, Sessions: c.sessions}
		if f := c.describe.Load(); f != nil {
			(*f)(&hb)
		}
		value, err := json.Marshal(hb)
		if err != nil {
			c.log.Error("encoding heartbeat", "err", err)
			return
		}
		res := make(chan error, 1)
		cl.Produce(ctx, &kgo.Record{Topic: Topic, Key: []byte(c.id), Value: value}, func(_ *kgo.Record, err error) { res <- err })
		select {
		case err = <-res:
		case <-ctx.Done():
			return
		}
		if err != nil && ctx.Err() == nil && !warned {
			warned = true
			c.log.Warn("cannot write the instance heartbeat: the duplicate instance.id check does not work while this lasts", "topic", Topic, "err", err)
		} else if err == nil {
			warned = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// final appends the heartbeat that says this run stopped (graceful stop:
// the broker has closed its connections and published their Wills), so
// that other instances do not wait for the lapse. Bounded by
// finalWait: a Kafka that does not answer gets none.
func (c *Check) final(cl *kgo.Client) {
	host, _ := os.Hostname()
	value, err := json.Marshal(Heartbeat{Nonce: c.nonce, Host: host, PID: os.Getpid(), Started: c.start, Stopped: true, Sessions: c.sessions})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalWait)
	defer cancel()
	res := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: Topic, Key: []byte(c.id), Value: value}, func(_ *kgo.Record, err error) { res <- err })
	select {
	case err = <-res:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.log.Debug("last heartbeat (stopped) not written", "err", err)
	}
}

// SetDescribe makes f complete every heartbeat written from now on.
func (c *Check) SetDescribe(f func(*Heartbeat)) { c.describe.Store(&f) }

// SetBeats makes f see every heartbeat read from now on (on the reader's
// goroutine); own is true for this run's own.
func (c *Check) SetBeats(f func(id string, hb Heartbeat, own bool)) { c.beats.Store(&f) }

// Started is when this run started (its heartbeats say so).
func (c *Check) Started() time.Time { return c.start }

// Armed reports whether this run's own first heartbeat has been read back:
// from then on a heartbeat of its id with another nonce is a duplicate.
func (c *Check) Armed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed
}

// observe handles one heartbeat read back.
func (c *Check) observe(r *kgo.Record) {
	var hb Heartbeat
	if err := json.Unmarshal(r.Value, &hb); err != nil {
		return
	}
	if f := c.beats.Load(); f != nil {
		(*f)(string(r.Key), hb, string(r.Key) == c.id && hb.Nonce == c.nonce)
	}
	if string(r.Key) != c.id || hb.Stopped {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hb.Nonce == c.nonce {
		c.armed = true
		return
	}
	if !c.armed {
		return // appended before this run was announced: a previous run, maybe dead
	}
	c.dupSeen = time.Now()
	c.dupDetail = fmt.Sprintf("host %s pid %d started %s", hb.Host, hb.PID, hb.Started.Format(time.RFC3339))
}

// duplicate reports whether another live process uses this id, and which.
func (c *Check) duplicate() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dupSeen.IsZero() || time.Since(c.dupSeen) > StaleBeats*c.every {
		return false, ""
	}
	return true, c.dupDetail
}

// Status is the check's contribution to /readyz.
func (c *Check) Status() (bool, string) {
	if dup, who := c.duplicate(); dup {
		return false, fmt.Sprintf("duplicate instance.id %q: another running process (%s) uses it", c.id, who)
	}
	return true, ""
}

// Close stops Run and waits for it, or for ctx. It is safe to call more
// than once and without Run.
func (c *Check) Close(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stop) })
	if c.running.CompareAndSwap(false, true) {
		close(c.done) // Run never started, and now never will
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("instance check close: %w", ctx.Err())
	}
}

// Version is the binary's version, for the heartbeat: its VCS revision
// when built from a checkout, else its module version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return bi.Main.Version
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
