// Package bridge wires Ferry together: the embedded MQTT broker (mochi), the
// hook that hands every accepted PUBLISH to the ring, the Kafka producer
// (package producer) that drains the ring into Kafka, the reverse consumer
// (package reverse) whose records the bridge publishes to MQTT subscribers
// (reverse.go: its Sink), the session engine (package session: sessions and
// retained messages in Kafka), and the HTTP endpoints for metrics and
// health.
//
// Lifecycle: New builds everything and checks the configuration; Run starts
// the listeners and workers and blocks until its context ends or Close is
// called; shutdown then stops accepting MQTT connections, drains the ring
// into Kafka (PUBACKs still reach connected clients), commits the reverse
// consumer's offsets and closes, bounded by shutdown_timeout.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/admin/backend"
	"github.com/ferry-bridge/ferry/instance"
	"github.com/ferry-bridge/ferry/internal/kafkaclient"
	"github.com/ferry-bridge/ferry/internal/mqttconn"
	"github.com/ferry-bridge/ferry/kafkawatch"
	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/ringbuffer"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/share"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Bridge is one Ferry instance.
type Bridge struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics

	server      *mqtt.Server
	canRead     aclCheck // the MQTT ACL's read check (nil: no ACL)
	canWrite    aclCheck // the MQTT ACL's publish check (nil: no ACL)
	hook        *hook
	ring        *ringbuffer.Ring[*producer.Record]
	tm          *topicmap.Map
	kclient     *kafka.Client
	producer    *producer.Producer
	reverse     *reverse.Consumer
	demand      *demander // reading on demand (demand.go); nil when off
	share       *share.Manager
	order       *reverse.InflightOrder
	stateEngine *session.Engine // sessions and retained messages in Kafka
	embedded    *embeddedKafka
	http        *httpServer
	instance    *instance.Check
	fleet       *backend.Fleet   // the live instances, from the heartbeats
	admin       *backend.Backend // the admin API's (nil: off)

	// replaySlots is how many session replays run at once (0: session.MaxReplays);
	// tests set it before Run.
	replaySlots int
	// wrapTransport, when set (tests, before Run), wraps the kafka-go
	// transport the producer and the admin requests use.
	wrapTransport func(kafka.RoundTripper) kafka.RoundTripper

	brokers   []string
	mqttAddrs map[string]string
	kafka     *kafkawatch.Watch

	workers       sync.WaitGroup
	hardCancel    context.CancelFunc
	watchCancel   context.CancelFunc
	watchDone     chan struct{}
	reverseCtx    context.Context
	reverseCancel context.CancelFunc

	ready       chan struct{}
	failedStart bool // Run's start failed: shutdown only cleans up
	stop        chan struct{}
	stopOnce    sync.Once
	done        chan struct{}
	running     atomic.Bool
	closeOnce   sync.Once
	closeErr    error
}

// New validates cfg and builds a bridge. Nothing listens until Run.
// reg receives the bridge's metrics and is served on /metrics.
func New(cfg Config, log *slog.Logger, reg *prometheus.Registry) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	tm, err := topicmap.New(cfg.Topics)
	if err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	ring, err := ringbuffer.New[*producer.Record](cfg.Ring.Capacity)
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	b := &Bridge{
		cfg: cfg, log: log, reg: reg, tm: tm, ring: ring,
		mqttAddrs: make(map[string]string),
		ready:     make(chan struct{}),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	b.metrics, err = newMetrics(reg, func() float64 { return float64(ring.Len()) }, func() float64 { return float64(ring.Cap()) })
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return b, nil
}

// Ready is closed once the listeners accept connections.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// MQTTAddr is the bound address of the TCP MQTT listener (after Ready).
func (b *Bridge) MQTTAddr() string { return b.mqttAddrs["tcp"] }

// WSAddr is the bound address of the WebSocket listener, if any.
func (b *Bridge) WSAddr() string { return b.mqttAddrs["ws"] }

// TLSAddr is the bound address of the TLS listener, if any.
func (b *Bridge) TLSAddr() string { return b.mqttAddrs["tls"] }

// HTTPAddr is the bound address of the HTTP server, if any.
func (b *Bridge) HTTPAddr() string {
	if b.http == nil {
		return ""
	}
	return b.http.addr
}

// KafkaBrokers is the bootstrap list in use (the embedded one's address
// when no brokers were configured).
func (b *Bridge) KafkaBrokers() []string { return b.brokers }

// InstanceID names this instance in origin headers.
func (b *Bridge) InstanceID() string { return b.cfg.Instance.ID }

// Run starts the bridge and blocks until ctx ends or Close is called, then
// shuts down gracefully. It returns the first start-up error, if any.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("bridge: Run called twice")
	}
	defer close(b.done)
	if err := b.start(ctx); err != nil {
		// Clean up quietly: "ferry bridge stopped" before the start error
		// would read as if the bridge had run.
		b.failedStart = true
		b.shutdown()
		return err
	}
	close(b.ready)
	select {
	case <-ctx.Done():
	case <-b.stop:
	}
	return b.shutdown()
}

// Close stops a running bridge and waits for its shutdown, or for ctx.
// It is safe to call more than once and without Run.
func (b *Bridge) Close(ctx context.Context) error {
	b.stopOnce.Do(func() { close(b.stop) })
	if !b.running.Load() {
		return nil
	}
	select {
	case <-b.done:
		return b.closeErr
	case <-ctx.Done():
		return fmt.Errorf("bridge: close: %w", ctx.Err())
	}
}

func (b *Bridge) start(ctx context.Context) error {
	brokers := b.cfg.Kafka.Brokers
	if len(brokers) == 0 {
		ek, err := startEmbeddedKafka(b.cfg.Kafka.EmbeddedPort)
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		b.embedded = ek
		brokers = ek.addrs
		b.log.Warn("no kafka.brokers configured: started an EMBEDDED IN-MEMORY KAFKA — for trying Ferry out only, NOT FOR PRODUCTION (data is lost on exit)",
			"brokers", brokers)
		if ek.wanted != 0 {
			b.log.Warn("kafka.embedded_port in use (a Kafka already runs there? --kafka 127.0.0.1:PORT uses it): the embedded Kafka took another port",
				"wanted", ek.wanted, "brokers", brokers)
		}
	}
	b.brokers = brokers
	if b.cfg.Kafka.Acks == "one" {
		b.log.Warn("kafka.acks=one: a PUBACK means only the partition leader has the record; it is lost if the leader fails before a follower copies it (use kafka.acks=all)")
	}
	transport, err := newTransport(b.cfg.Kafka, b.cfg.Instance.ID)
	if err != nil {
		return err
	}
	b.kclient = &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: b.cfg.Kafka.AckTimeout, Transport: transport}
	if b.wrapTransport != nil {
		b.kclient.Transport = b.wrapTransport(transport)
	}
	pcfg := b.cfg.Kafka.producerConfig()
	pcfg.Embedded = b.embedded != nil
	b.producer, err = producer.New(pcfg, b.log, b.kclient, b.ring, b.metrics.producer())
	if err != nil {
		return err
	}

	b.instance, err = newInstanceCheck(b.cfg, b.log, b.reg, b.kclient, brokers)
	if err != nil {
		return err
	}
	go b.instance.Run(context.Background()) // stopped and awaited by shutdown
	// Kafka's reachability is watched from here on: /readyz answers from
	// the first check, whatever start-up still does (reading the state
	// topics, opening listeners).
	b.kafka = kafkawatch.New(b.log, brokers)
	watchCtx, watchCancel := context.WithCancel(context.Background())
	b.watchCancel = watchCancel
	b.watchDone = make(chan struct{})
	go func() {
		defer close(b.watchDone)
		// Once Kafka answers: a warning when the topics Ferry creates would
		// keep one copy on a cluster of several brokers (package kafkawatch).
		// Not for the embedded Kafka, one broker by design.
		var checked sync.WaitGroup
		if b.embedded == nil {
			rc := &kafkawatch.ReplicationCheck{Log: b.log, Client: b.kclient, Configured: b.cfg.Kafka.ReplicationFactor, Retry: time.Second}
			checked.Add(1)
			go func() {
				defer checked.Done()
				rc.Run(watchCtx)
			}()
		}
		b.kafka.Run(watchCtx, b.kclient)
		checked.Wait()
	}()

	hdrs, err := topicmap.ParseHeaderSet(b.cfg.Kafka.Headers) // validated by New
	if err != nil {
		return fmt.Errorf("kafka.headers: %w", err)
	}
	b.server = mqtt.New(b.mochiOptions())
	b.hook = &hook{cfg: b.cfg, log: b.log, tm: b.tm, ring: b.ring, metrics: b.metrics, server: b.server,
		logs: newRateLimiter(b.log, 10*time.Second), hdrs: topicmap.NewHeaderBuilder(hdrs, b.cfg.Instance.ID),
		locals: newLocalPublishers(), producer: b.producer}
	if b.canRead, b.canWrite, err = addAuth(b.server, b.cfg.MQTT); err != nil {
		return err
	}
	if err := b.server.AddHook(&compatHook{obscureNotAuthorized: b.cfg.MQTT.ObscureNotAuthorized}, nil); err != nil {
		return fmt.Errorf("mqtt compat hook: %w", err)
	}
	if kh := newKeepaliveHook(b.cfg.MQTT.MaxKeepalive); kh != nil {
		if err := b.server.AddHook(kh, nil); err != nil {
			return fmt.Errorf("mqtt keepalive hook: %w", err)
		}
	}
	if err := b.server.AddHook(b.hook, nil); err != nil {
		return fmt.Errorf("mqtt hook: %w", err)
	}
	b.order = reverse.NewInflightOrder(b.server)
	if err := b.openState(ctx, brokers); err != nil {
		return err
	}
	b.hook.retained = b.stateEngine.Retained()
	b.hook.inj = b.stateEngine.Injections()
	b.hook.progress = b.stateEngine.ReverseProgress() // nil without reverse topics
	if err := b.addSessionHooks(); err != nil {
		return err
	}
	adminAPI, err := b.startAdmin()
	if err != nil {
		return err
	}
	if err := b.addListeners(); err != nil {
		return err
	}
	if err := b.server.Serve(); err != nil {
		return fmt.Errorf("mqtt serve: %w", err)
	}
	for id, l := range b.listenersByID() {
		b.mqttAddrs[id] = l
	}

	hard, cancel := context.WithCancel(context.Background())
	b.hardCancel = cancel
	b.workers.Add(1)
	go func() {
		defer b.workers.Done()
		b.producer.Run(hard)
	}()

	b.reverseCtx, b.reverseCancel = context.WithCancel(context.Background())
	if len(b.cfg.Reverse.Topics) > 0 {
		if err := b.startReverse(brokers); err != nil {
			return fmt.Errorf("reverse path: %w", err)
		}
		b.workers.Add(1)
		go func() {
			defer b.workers.Done()
			if err := b.reverse.Run(b.reverseCtx); err != nil {
				b.log.Error("reverse path stopped", "err", err)
			}
		}()
	}
	if b.cfg.Reverse.OnDemand {
		if err := b.startDemand(brokers); err != nil {
			return fmt.Errorf("reading on demand: %w", err)
		}
		b.hook.demand.Store(b.demand)
		b.workers.Add(2)
		go func() {
			defer b.workers.Done()
			if err := b.demand.consumer.Run(b.reverseCtx); err != nil {
				b.log.Error("reading on demand stopped", "err", err)
			}
		}()
		go func() {
			defer b.workers.Done()
			b.demand.run(b.reverseCtx)
		}()
	}

	if err := b.startShare(brokers); err != nil {
		return fmt.Errorf("shared subscriptions: %w", err)
	}
	b.workers.Add(1)
	go func() {
		defer b.workers.Done()
		_ = b.share.Run(b.reverseCtx)
	}()

	if b.cfg.HTTP.Listen != "" {
		b.http, err = startHTTP(b.cfg.HTTP, b.log, b.reg, b.healthy, b.readyNow, adminAPI)
		if err != nil {
			return err
		}
	}
	b.instance.SetDescribe(b.describeInstance) // after the addresses are known
	b.log.Info("ferry bridge started", "mqtt", b.mqttAddrs, "kafka", brokers, "http", b.HTTPAddr(),
		"instance", b.cfg.Instance.ID, "reverse_topics", b.cfg.Reverse.Topics)
	return nil
}

func (b *Bridge) mochiOptions() *mqtt.Options {
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = uint32(b.cfg.MQTT.MaxPacketSize)
	caps.MaximumTopicLevels, caps.MaximumTopicLength = b.cfg.MQTT.MaxTopicLevels, b.cfg.MQTT.MaxTopicLength
	caps.MaximumClientWritesPending = int32(b.cfg.MQTT.ClientWritesPending)
	caps.ReceiveMaximum = uint16(b.cfg.MQTT.MaxInflight)
	if b.cfg.maxInflightOut > 0 {
		caps.MaximumInflight = b.cfg.maxInflightOut
	}
	// The expiry of 3.1.1 persistent sessions, and the most an MQTT 5
	// client gets (mochi's CONNACK says so when it asked for more).
	caps.MaximumSessionExpiryInterval = b.cfg.MQTT.maxSessionExpiry()
	// A cap on the Message Expiry Interval a publisher asks (0: none);
	// mochi's default, a day, was applied to every message, asked or not
	// (FERRY.md change 10 (expiry)).
	caps.MaximumMessageExpiryInterval = b.cfg.MQTT.maxMessageExpiry()
	// Acknowledgements carry only their own reason string and user
	// properties, never the PUBLISH's (a strict client refuses them).
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	caps.Compatibilities.ObscureNotAuthorized = b.cfg.MQTT.ObscureNotAuthorized
	return &mqtt.Options{
		Capabilities: caps,
		InlineClient: true,
		// mochi logs every failed connection at warn, with packet dumps: keep
		// its errors only, unless we are debugging.
		Logger: slog.New(levelFloor{Handler: b.log.Handler(), min: slog.LevelError}).With("component", "mqtt"),
	}
}

func (b *Bridge) addListeners() error {
	add := func(l listeners.Listener) error {
		if err := b.server.AddListener(&mqttconn.Listener{Listener: l, Timeout: b.cfg.MQTT.WriteTimeout}); err != nil {
			return fmt.Errorf("mqtt listener %s on %s: %w%s", l.ID(), l.Address(), err, inUseHint(err, listenerKey[l.ID()]))
		}
		return nil
	}
	if b.cfg.MQTT.Listen != "" {
		if err := add(listeners.NewTCP(listeners.Config{ID: "tcp", Address: b.cfg.MQTT.Listen})); err != nil {
			return err
		}
	}
	if b.cfg.MQTT.TLSListen != "" {
		tc, err := serverTLS(b.cfg.MQTT.TLS)
		if err != nil {
			return err
		}
		if err := add(listeners.NewTCP(listeners.Config{ID: "tls", Address: b.cfg.MQTT.TLSListen, TLSConfig: tc})); err != nil {
			return err
		}
	}
	if b.cfg.MQTT.WSListen != "" {
		if err := add(listeners.NewWebsocket(listeners.Config{ID: "ws", Address: b.cfg.MQTT.WSListen})); err != nil {
			return err
		}
	}
	return nil
}

// listenersByID reads the bound addresses (port 0 resolved).
func (b *Bridge) listenersByID() map[string]string {
	out := make(map[string]string)
	for _, id := range []string{"tcp", "tls", "ws"} {
		if l, ok := b.server.Listeners.Get(id); ok {
			out[id] = boundAddr(l)
		}
	}
	return out
}

func boundAddr(l listeners.Listener) string {
	type netListener interface{ Address() string }
	switch v := l.(type) {
	case *listeners.TCP:
		return v.Address()
	case *listeners.Websocket:
		return v.Address()
	case netListener:
		return v.Address()
	}
	return ""
}

func (b *Bridge) healthy() bool { return true }

func (b *Bridge) readyNow() (bool, string) {
	select {
	case <-b.ready:
	default:
		return false, "listeners not started"
	}
	if ok, why := b.kafka.Status(); !ok {
		return false, why
	}
	if ok, why := b.instance.Status(); !ok {
		return false, why
	}
	return true, "ok"
}

// shutdown: stop accepting -> drain ring into Kafka -> stop the reverse path
// (commits) -> close clients and Kafka. Bounded by ShutdownTimeout.
func (b *Bridge) shutdown() error {
	b.closeOnce.Do(func() {
		start := time.Now()
		deadline := time.AfterFunc(b.cfg.ShutdownTimeout, func() {
			b.log.Error("shutdown timeout reached: failing what is still pending", "timeout", b.cfg.ShutdownTimeout)
			if b.hardCancel != nil {
				b.hardCancel()
			}
		})
		defer deadline.Stop()
		var errs []error
		if b.server != nil {
			for _, l := range []string{"tcp", "tls", "ws"} {
				if ln, ok := b.server.Listeners.Get(l); ok {
					ln.Close(func(string) {}) // stop accepting; clients stay for their PUBACKs
				}
			}
		}
		if b.watchCancel != nil {
			b.watchCancel()
			<-b.watchDone
		}
		if b.reverseCancel != nil {
			b.reverseCancel()
		}
		b.ring.Close()
		depth := b.ring.Len()
		b.workersDone()
		if b.hardCancel != nil {
			b.hardCancel()
		}
		if b.server != nil {
			for _, cl := range b.server.Clients.GetAll() {
				if !cl.Net.Inline {
					cl.Stop(ErrClosed)
				}
			}
			if err := b.server.Close(); err != nil {
				errs = append(errs, fmt.Errorf("mqtt close: %w", err))
			}
		}
		if b.stateEngine != nil {
			// The session ends the broker just wrote (tombstones of clean
			// sessions are not awaited) go before the last heartbeat: an
			// instance that reads it and then the sessions topic finds
			// none of them still connected.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := b.stateEngine.Flush(ctx); err != nil {
				b.log.Debug("session writes not flushed at stop", "err", err)
			}
			cancel()
		}
		if b.instance != nil {
			// After the broker: the heartbeat lasts while clients are
			// connected, and its last one says the instance stopped.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, b.instance.Close(ctx))
			cancel()
		}
		b.closeAdmin()
		b.closeState()      // after the broker: its last session writes
		if b.share != nil { // after the broker: its members are gone
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, b.share.Close(ctx))
			cancel()
		}
		rs := []*reverse.Consumer{b.reverse}
		if b.demand != nil {
			rs = append(rs, b.demand.consumer)
		}
		for _, r := range rs {
			if r != nil {
				if err := r.Close(); err != nil {
					errs = append(errs, fmt.Errorf("reverse close: %w", err))
				}
			}
		}
		if b.kclient != nil {
			// Its connection pools, and the goroutine that refreshes the
			// cluster's metadata every 3 s, outlive the producer otherwise.
			kafkaclient.CloseIdle(b.kclient)
		}
		if b.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			errs = append(errs, b.http.close(ctx))
			cancel()
		}
		if b.embedded != nil {
			b.embedded.close()
		}
		b.closeErr = errors.Join(errs...)
		if b.failedStart {
			b.log.Debug("cleaned up after a failed start", "took", time.Since(start).Round(time.Millisecond))
			return
		}
		b.log.Info("ferry bridge stopped", "drained", depth, "took", time.Since(start).Round(time.Millisecond))
	})
	return b.closeErr
}

func (b *Bridge) workersDone() { b.workers.Wait() }

// levelFloor drops records below min, except when the wrapped handler
// is enabled for debug.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (l levelFloor) Enabled(ctx context.Context, level slog.Level) bool {
	if l.Handler.Enabled(ctx, slog.LevelDebug) {
		return true
	}
	return level >= l.min && l.Handler.Enabled(ctx, level)
}

func (l levelFloor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelFloor{Handler: l.Handler.WithAttrs(attrs), min: l.min}
}

func (l levelFloor) WithGroup(name string) slog.Handler {
	return levelFloor{Handler: l.Handler.WithGroup(name), min: l.min}
}
