// Package backend is the admin API's Backend (package admin) on one
// instance: the HTTP side asks, this package answers for the whole
// cluster, from any instance.
//
// The contract: reads come from what every instance holds already — the
// live instances from the heartbeats (Fleet, fed by package instance), the
// sessions and retained tables of the session engine (package session),
// the topic map — and never show a payload or a password. What only the
// instance holding a client's connection can do or see (describe it,
// disconnect it) is asked of that instance through the Kafka topic
// _ferry_admin (control.go), as a takeover goes through the sessions
// topic: a request carries its deadline and is dropped when read later, a
// reply reaches only the run that asked. Ending a session disconnects its
// client first, at its owner, and waits for the disconnect to be written;
// clearing a retained message writes its tombstone and clears this
// instance's broker's copy before it answers (session.Engine). When Kafka refuses _ferry_admin, actions on other instances'
// clients are off, and that is logged. The package does not import the
// bridge: the bridge gives it the broker, the engine and the rest (Deps).
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/admin"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// adminWait bounds the wait of an action for its owner's answer, and of a
// session's end for its client's disconnect to be written.
const adminWait = 5 * time.Second

// Config is what the backend is configured with.
type Config struct {
	InstanceID    string // instance.id
	SessionsTopic string // state.sessions_topic: clusters may share one Kafka
	// ReplicationFactor is kafka.replication_factor, for _ferry_admin's
	// creation.
	ReplicationFactor int
	Brokers           []string
	// Started is when this instance started: _ferry_admin is read from a
	// little before (instance.Lookback), as the heartbeats are.
	Started time.Time
}

// Deps are what the backend runs with besides its configuration.
type Deps struct {
	Log *slog.Logger
	// Server is this instance's broker: its clients are described and
	// disconnected here, and a hook (added by Start) notes when each
	// connected.
	Server *mqtt.Server
	// Engine holds the sessions and retained tables.
	Engine *session.Engine
	// Topics is the topic map (GET /api/v1/route), Headers the forward
	// path's standard headers.
	Topics  *topicmap.Map
	Headers *topicmap.HeaderBuilder
	// Fleet is the live instances, fed with the heartbeats.
	Fleet *Fleet
	// Client creates _ferry_admin (kafka-go); KafkaOpts are the options of
	// the franz-go client that reads and writes it (TLS, SASL).
	Client    *kafka.Client
	KafkaOpts []kgo.Opt
	// Consumed reports whether the reverse path consumes a Kafka topic
	// (nil: there is no reverse path).
	Consumed func(kafkaTopic string) bool
}

// Backend is one instance's side of the admin API (admin.Backend): reads
// from the state every instance holds, and actions through the owning
// instance (control, adminTopic).
type Backend struct {
	id       string
	log      *slog.Logger
	server   *mqtt.Server
	engine   *session.Engine
	topics   *topicmap.Map
	headers  *topicmap.HeaderBuilder
	fleet    *Fleet
	ctl      *control
	since    *connectTimes
	consumed func(string) bool
}

// New builds the backend; Start starts it.
func New(cfg Config, d Deps) (*Backend, error) {
	ctl, err := newControl(cfg, d)
	if err != nil {
		return nil, err
	}
	a := &Backend{id: cfg.InstanceID, log: d.Log, server: d.Server, engine: d.Engine, topics: d.Topics,
		headers: d.Headers, fleet: d.Fleet, ctl: ctl, since: &connectTimes{at: make(map[*mqtt.Client]time.Time)},
		consumed: d.Consumed}
	if a.consumed == nil {
		a.consumed = func(string) bool { return false }
	}
	ctl.handle = a.handle
	return a, nil
}

// Start adds the hook that notes connection times to the broker and
// starts the reader of _ferry_admin; Close stops it.
func (a *Backend) Start() error {
	if err := a.server.AddHook(a.since, nil); err != nil {
		return fmt.Errorf("admin hook: %w", err)
	}
	go a.ctl.run()
	return nil
}

// Close stops the reader of _ferry_admin and waits for it.
func (a *Backend) Close() { a.ctl.close() }

func (a *Backend) Instances(context.Context) ([]admin.Instance, error) {
	return a.fleet.live(), nil
}

// record is client's session record, read after the table's end.
func (a *Backend) record(ctx context.Context, client string) (*state.Session, error) {
	rec, err := a.engine.Session(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("reading the sessions table: %w", err)
	}
	return rec, nil
}

func (a *Backend) Client(ctx context.Context, id string) (*admin.Client, error) {
	rec, err := a.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: no client %q connected, and no session of it", admin.ErrNotFound, id)
	}
	c := &admin.Client{ClientID: id, Connected: rec.Connected, Username: string(rec.Username), Protocol: rec.ProtocolVersion,
		Listener: rec.Listener, Subscriptions: adminSubs(rec.Subs), CleanSession: rec.Clean}
	if !rec.Connected {
		return c, nil
	}
	c.Instance = rec.Owner
	var live admin.Client
	if rec.Owner == a.id {
		live = a.describe(id)
	} else {
		wctx, cancel := context.WithTimeout(ctx, adminWait)
		defer cancel()
		if err := a.ctl.ask(wctx, rec.Owner, "describe", id, "", &live); err != nil {
			return nil, fmt.Errorf("asking instance %s, which holds the connection: %w", rec.Owner, err)
		}
	}
	if !live.Connected {
		// Gone meanwhile, or its disconnect not yet written.
		c.Connected, c.Instance = false, ""
		return c, nil
	}
	live.Instance = rec.Owner
	return &live, nil
}

// describe is what this broker knows of its client id's connection.
func (a *Backend) describe(id string) admin.Client {
	cl, ok := a.server.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return admin.Client{ClientID: id}
	}
	c := admin.Client{ClientID: id, Connected: true, Instance: a.id, Username: string(cl.Properties.Username),
		Protocol: cl.Properties.ProtocolVersion, Remote: cl.Net.Remote, Listener: cl.Net.Listener,
		Keepalive: cl.State.Keepalive, Inflight: cl.State.Inflight.Len(), CleanSession: cl.Properties.Clean,
		Subscriptions: []admin.Subscription{}}
	if at, ok := a.since.get(cl); ok {
		c.ConnectedSince = &at
	}
	for _, s := range cl.State.Subscriptions.GetAll() {
		c.Subscriptions = append(c.Subscriptions, admin.Subscription{Filter: s.Filter, QoS: s.Qos, NoLocal: s.NoLocal,
			RetainAsPublished: s.RetainAsPublished, RetainHandling: s.RetainHandling, Identifier: s.Identifier})
	}
	return c
}

func adminSubs(subs []state.Subscription) []admin.Subscription {
	out := make([]admin.Subscription, 0, len(subs))
	for _, s := range subs {
		out = append(out, admin.Subscription{Filter: s.Filter, QoS: s.QoS, NoLocal: s.NoLocal,
			RetainAsPublished: s.RetainAsPublished, RetainHandling: s.RetainHandling, Identifier: s.Identifier})
	}
	return out
}

func msTime(ms int64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(ms)
	return &t
}

func (a *Backend) SessionPage(q admin.Page, connected *bool) ([]admin.SessionItem, bool) {
	page, more := a.engine.SessionPage(q.Prefix, q.After, q.Limit, connected)
	out := make([]admin.SessionItem, len(page))
	for i, s := range page {
		out[i] = admin.SessionItem{ClientID: s.Client, Connected: s.Connected, Owner: s.Owner, ExpiresAt: msTime(s.ExpiresAt)}
	}
	return out, more
}

func (a *Backend) Session(ctx context.Context, id string) (*admin.Session, error) {
	rec, err := a.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: no session %q", admin.ErrNotFound, id)
	}
	s := &admin.Session{ClientID: id, Owner: rec.Owner, Connected: rec.Connected, DisconnectedAt: msTime(rec.Disconnected),
		ExpiryInterval: rec.Expiry, ExpiresAt: msTime(a.engine.SessionExpiresAt(rec)), Protocol: rec.ProtocolVersion,
		Username: string(rec.Username), Subscriptions: adminSubs(rec.Subs), Partitions: []admin.Partition{}, Pending: len(rec.Pending)}
	if len(rec.Positions) == 0 {
		return s, nil
	}
	var topics []string
	seen := map[string]bool{}
	for _, p := range rec.Positions {
		if !seen[p.Topic] {
			seen[p.Topic] = true
			topics = append(topics, p.Topic)
		}
	}
	ends, err := a.engine.EndOffsets(ctx, topics)
	if err != nil {
		return nil, err
	}
	for _, p := range rec.Positions {
		end, ok := ends[p.Topic][p.Partition]
		if !ok {
			continue
		}
		lag := max(end-p.Offset, 0)
		s.Partitions = append(s.Partitions, admin.Partition{Topic: p.Topic, Partition: p.Partition, Position: p.Offset, End: end, Lag: lag})
		s.Lag += lag
	}
	return s, nil
}

func (a *Backend) RetainedPage(q admin.Page) ([]admin.RetainedItem, bool) {
	page, more := a.engine.RetainedPage(q.Prefix, q.After, q.Limit)
	out := make([]admin.RetainedItem, len(page))
	now := time.Now()
	for i, r := range page {
		out[i] = admin.RetainedItem{Topic: r.Topic, Size: r.Size, QoS: r.QoS, Created: r.Created, AgeSec: int64(now.Sub(r.Created) / time.Second)}
	}
	return out, more
}

func (a *Backend) Route(q admin.RouteQuery) (*admin.Route, error) {
	tm := a.topics
	if q.KafkaTopic != "" {
		rt := &admin.Route{KafkaTopic: q.KafkaTopic, Rule: topicmap.DefaultRule, Consumed: a.consumed(q.KafkaTopic)}
		d, err := tm.Reverse(q.KafkaTopic, nil)
		if err != nil {
			rt.Excluded = errors.Is(err, topicmap.ErrExcluded)
			rt.Error = err.Error()
			return rt, nil
		}
		rt.MQTTTopic, rt.QoS, rt.Retain = d.Topic, d.QoS, d.Retain
		return rt, nil
	}
	rt := &admin.Route{MQTTTopic: q.MQTTTopic, Rule: topicmap.DefaultRule}
	r, err := tm.Forward(q.MQTTTopic)
	if err != nil {
		rt.Excluded = errors.Is(err, topicmap.ErrExcluded)
		rt.Error = err.Error()
		return rt, nil
	}
	rt.KafkaTopic, rt.Key, rt.Rule = r.Topic, string(r.Key), r.Rule
	// The headers the forward path writes (hook.newRecord), for this
	// publish; a QoS 1/2 publish's packet id is its own.
	std := topicmap.Standard{Topic: q.MQTTTopic, QoS: q.QoS, Retain: q.Retain, ClientID: q.ClientID}
	if q.QoS > 0 {
		std.PacketID = 1
	}
	if a.headers.Set().Has(topicmap.HeaderSeq) {
		std.Seq = 1
	}
	for _, h := range topicmap.AppendStandard(a.headers, []topicmap.Header(nil), std) {
		rt.Headers = append(rt.Headers, admin.Header{Key: h.Key, Value: string(h.Value)})
	}
	for _, h := range r.Headers {
		rt.Headers = append(rt.Headers, admin.Header{Key: h.Key, Value: string(h.Value)})
	}
	return rt, nil
}

// actResult is an acting instance's answer.
type actResult struct {
	Done bool `json:"done"`
}

// handle acts on a request read from adminTopic for this instance.
func (a *Backend) handle(op, client, by string) any {
	switch op {
	case "describe":
		return a.describe(client)
	case "disconnect":
		return actResult{Done: a.disconnectHere(client, by)}
	}
	return actResult{}
}

// disconnectHere disconnects this broker's client id, if connected here:
// an MQTT 5 client with DISCONNECT 0x98 Administrative action; an MQTT
// 3.1.1 client's connection is closed (3.1.1 has no DISCONNECT from the
// server).
func (a *Backend) disconnectHere(id, by string) bool {
	cl, ok := a.server.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return false
	}
	a.log.Info("disconnecting a client: admin action", "client", id, "by", by)
	if cl.Properties.ProtocolVersion < 5 {
		cl.Stop(packets.ErrAdministrativeAction)
		return true
	}
	_ = a.server.DisconnectClient(cl, packets.ErrAdministrativeAction)
	return true
}

func (a *Backend) Disconnect(ctx context.Context, id, by string) (*admin.ActionResult, error) {
	rec, err := a.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec == nil || !rec.Connected {
		return nil, fmt.Errorf("%w: client %q is not connected", admin.ErrNotFound, id)
	}
	done, err := a.disconnectAt(ctx, rec.Owner, id, by)
	if err != nil {
		return nil, err
	}
	return &admin.ActionResult{Action: "disconnect", Target: id, Done: done, Instance: rec.Owner}, nil
}

// disconnectAt has instance disconnect id (itself when it is this one).
func (a *Backend) disconnectAt(ctx context.Context, instance, id, by string) (bool, error) {
	if instance == a.id {
		return a.disconnectHere(id, by), nil
	}
	wctx, cancel := context.WithTimeout(ctx, adminWait)
	defer cancel()
	var res actResult
	if err := a.ctl.ask(wctx, instance, "disconnect", id, by, &res); err != nil {
		return false, fmt.Errorf("asking instance %s, which holds the connection: %w", instance, err)
	}
	return res.Done, nil
}

func (a *Backend) EndSession(ctx context.Context, id, by string) (*admin.ActionResult, error) {
	rec, err := a.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: no session %q", admin.ErrNotFound, id)
	}
	res := &admin.ActionResult{Action: "end_session", Target: id, Instance: rec.Owner}
	if rec.Connected {
		// Its owner disconnects it and writes that it went (a tombstone
		// of a connected session would be repaired by its owner).
		if _, err := a.disconnectAt(ctx, rec.Owner, id, by); err != nil {
			return nil, err
		}
		if rec, err = a.offline(ctx, id, rec.Epoch); err != nil {
			return nil, err
		}
		res.Detail = "disconnected its client first"
		if rec == nil {
			res.Done = true // a clean session: its owner ended it
			return res, nil
		}
	}
	if err := a.engine.EndSession(ctx, id); err != nil {
		return nil, err
	}
	res.Done = true
	return res, nil
}

// offline polls id's record until its client of epoch is written gone
// (nil: the session ended), within adminWait.
func (a *Backend) offline(ctx context.Context, id string, epoch int64) (*state.Session, error) {
	deadline := time.Now().Add(adminWait)
	for {
		rec, err := a.record(ctx, id)
		if err != nil {
			return nil, err
		}
		switch {
		case rec == nil || !rec.Connected && rec.Epoch == epoch:
			return rec, nil
		case rec.Epoch != epoch:
			return nil, fmt.Errorf("%w: client %q connected again (instance %s) while its session was being ended", session.ErrKafkaUnavailable, id, rec.Owner)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("client %q: its disconnect was not written within %s", id, adminWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (a *Backend) ClearRetained(ctx context.Context, topic, by string) (*admin.ActionResult, error) {
	ok, err := a.engine.ClearRetained(ctx, topic)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: no retained message on %q", admin.ErrNotFound, topic)
	}
	return &admin.ActionResult{Action: "clear_retained", Target: topic, Done: true, Instance: a.id}, nil
}

// connectTimes notes when each connection of this broker was established
// (the admin API's connected_since): a mochi hook.
type connectTimes struct {
	mqtt.HookBase
	mu sync.Mutex
	at map[*mqtt.Client]time.Time
}

func (c *connectTimes) ID() string { return "ferry-admin-connect-times" }

func (c *connectTimes) Provides(b byte) bool {
	return b == mqtt.OnSessionEstablished || b == mqtt.OnDisconnect
}

func (c *connectTimes) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	c.mu.Lock()
	c.at[cl] = time.Now()
	c.mu.Unlock()
}

func (c *connectTimes) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	c.mu.Lock()
	delete(c.at, cl)
	c.mu.Unlock()
}

func (c *connectTimes) get(cl *mqtt.Client) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[cl]
	return t, ok
}
