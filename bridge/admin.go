package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/admin"
	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// adminWait bounds the wait of an action for its owner's answer, and of a
// session's end for its client's disconnect to be written.
const adminWait = 5 * time.Second

// adminBackend is the bridge's side of the admin API (admin.Backend):
// reads from the state every instance holds, and actions through the
// owning instance (control, adminTopic).
type adminBackend struct {
	b     *Bridge
	fleet *liveInstances
	ctl   *control
	since *connectTimes
	// consumed reports whether the reverse path consumes a Kafka topic.
	consumed func(string) bool
}

// startAdmin builds the admin API when http.admin_token is configured:
// the heartbeats feed its instance list, a mochi hook notes connection
// times, and the control topic's reader starts. nil when it is off.
func (b *Bridge) startAdmin() (http.Handler, error) {
	if !b.cfg.HTTP.adminOn() {
		return nil, nil
	}
	token, err := b.cfg.HTTP.adminToken()
	if err != nil {
		return nil, err
	}
	ctl, err := newControl(b.cfg, b.log, b.kclient, b.brokers, b.instance.start)
	if err != nil {
		return nil, err
	}
	ab := &adminBackend{b: b, fleet: b.fleet, ctl: ctl,
		since: &connectTimes{at: make(map[*mqtt.Client]time.Time)}, consumed: func(string) bool { return false }}
	if len(b.cfg.Reverse.Topics) > 0 {
		ab.consumed = reverse.TopicMatcher(b.cfg.Reverse.Topics)
	}
	ctl.handle = ab.handle
	api, err := admin.New(ab, token, b.log, b.reg)
	if err != nil {
		return nil, err
	}
	if err := b.server.AddHook(ab.since, nil); err != nil {
		return nil, fmt.Errorf("admin hook: %w", err)
	}
	b.admin = ab
	go ctl.run()
	return api, nil
}

// closeAdmin stops the control topic's reader.
func (b *Bridge) closeAdmin() {
	if b.admin != nil {
		b.admin.ctl.close()
	}
}

// describeInstance completes this instance's heartbeat for the admin API.
func (b *Bridge) describeInstance(hb *heartbeat) {
	hb.HTTP, hb.MQTT, hb.Version = b.HTTPAddr(), b.mqttAddrs, buildVersion()
	hb.Clients = int(b.metricsConnections())
}

func (b *Bridge) metricsConnections() int64 {
	if b.server == nil {
		return 0
	}
	return atomic.LoadInt64(&b.server.Info.ClientsConnected)
}

// buildVersion is the binary's version: its VCS revision when built from
// a checkout, else its module version.
func buildVersion() string {
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

func (a *adminBackend) Instances(context.Context) ([]admin.Instance, error) {
	return a.fleet.live(), nil
}

// record is client's session record, read after the table's end.
func (a *adminBackend) record(ctx context.Context, client string) (*state.Session, error) {
	rec, err := a.b.stateEngine.Session(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("reading the sessions table: %w", err)
	}
	return rec, nil
}

func (a *adminBackend) Client(ctx context.Context, id string) (*admin.Client, error) {
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
	if rec.Owner == a.b.cfg.Instance.ID {
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
func (a *adminBackend) describe(id string) admin.Client {
	cl, ok := a.b.server.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return admin.Client{ClientID: id}
	}
	c := admin.Client{ClientID: id, Connected: true, Instance: a.b.cfg.Instance.ID, Username: string(cl.Properties.Username),
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

func (a *adminBackend) SessionPage(q admin.Page, connected *bool) ([]admin.SessionItem, bool) {
	page, more := a.b.stateEngine.SessionPage(q.Prefix, q.After, q.Limit, connected)
	out := make([]admin.SessionItem, len(page))
	for i, s := range page {
		out[i] = admin.SessionItem{ClientID: s.Client, Connected: s.Connected, Owner: s.Owner, ExpiresAt: msTime(s.ExpiresAt)}
	}
	return out, more
}

func (a *adminBackend) Session(ctx context.Context, id string) (*admin.Session, error) {
	rec, err := a.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: no session %q", admin.ErrNotFound, id)
	}
	s := &admin.Session{ClientID: id, Owner: rec.Owner, Connected: rec.Connected, DisconnectedAt: msTime(rec.Disconnected),
		ExpiryInterval: rec.Expiry, ExpiresAt: msTime(a.b.stateEngine.SessionExpiresAt(rec)), Protocol: rec.ProtocolVersion,
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
	ends, err := a.b.stateEngine.EndOffsets(ctx, topics)
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

func (a *adminBackend) RetainedPage(q admin.Page) ([]admin.RetainedItem, bool) {
	page, more := a.b.stateEngine.RetainedPage(q.Prefix, q.After, q.Limit)
	out := make([]admin.RetainedItem, len(page))
	now := time.Now()
	for i, r := range page {
		out[i] = admin.RetainedItem{Topic: r.Topic, Size: r.Size, QoS: r.QoS, Created: r.Created, AgeSec: int64(now.Sub(r.Created) / time.Second)}
	}
	return out, more
}

func (a *adminBackend) Route(q admin.RouteQuery) (*admin.Route, error) {
	tm := a.b.tm
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
	if a.b.hook.hdrs.Set().Has(topicmap.HeaderSeq) {
		std.Seq = 1
	}
	for _, h := range topicmap.AppendStandard(a.b.hook.hdrs, []topicmap.Header(nil), std) {
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
func (a *adminBackend) handle(op, client, by string) any {
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
func (a *adminBackend) disconnectHere(id, by string) bool {
	cl, ok := a.b.server.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return false
	}
	a.b.log.Info("disconnecting a client: admin action", "client", id, "by", by)
	if cl.Properties.ProtocolVersion < 5 {
		cl.Stop(packets.ErrAdministrativeAction)
		return true
	}
	_ = a.b.server.DisconnectClient(cl, packets.ErrAdministrativeAction)
	return true
}

func (a *adminBackend) Disconnect(ctx context.Context, id, by string) (*admin.ActionResult, error) {
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
func (a *adminBackend) disconnectAt(ctx context.Context, instance, id, by string) (bool, error) {
	if instance == a.b.cfg.Instance.ID {
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

func (a *adminBackend) EndSession(ctx context.Context, id, by string) (*admin.ActionResult, error) {
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
	if err := a.b.stateEngine.EndSession(ctx, id); err != nil {
		return nil, err
	}
	res.Done = true
	return res, nil
}

// offline polls id's record until its client of epoch is written gone
// (nil: the session ended), within adminWait.
func (a *adminBackend) offline(ctx context.Context, id string, epoch int64) (*state.Session, error) {
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

func (a *adminBackend) ClearRetained(ctx context.Context, topic, by string) (*admin.ActionResult, error) {
	ok, err := a.b.stateEngine.ClearRetained(ctx, topic)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: no retained message on %q", admin.ErrNotFound, topic)
	}
	return &admin.ActionResult{Action: "clear_retained", Target: topic, Done: true, Instance: a.b.cfg.Instance.ID}, nil
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
