package share

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Manager runs this instance's side of the share groups: it joins the
// consumer group of each shared subscription with a live member here,
// leaves it when the last one goes, and, as a hook of the embedded broker,
// keeps the broker's own deliveries away from shared subscriptions and
// hears the members' acknowledgements.
type Manager struct {
	mqtt.HookBase
	cfg Config
	d   Deps
	log *slog.Logger

	syncMu sync.Mutex // one sync or Close at a time

	mu      sync.Mutex
	sending map[sendKey]*delivery           // the delivery being put in flight (OnQosPublish)
	groups  map[string]*group               // "$share/{name}/{filter}" -> its group here
	owed    map[string]map[uint16]*delivery // member client id -> packet id -> what it owes (kept while it is connected)
	since   map[string]time.Time            // shared subscription -> when its first member here subscribed
	closed  bool
}

// New checks cfg and adds the Manager to d.Server as a hook; nothing is
// joined until Run.
func New(cfg Config, d Deps) (*Manager, error) {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, d: d, log: d.Log.With("component", "share"),
		groups: map[string]*group{}, owed: map[string]map[uint16]*delivery{}, since: map[string]time.Time{},
		sending: map[sendKey]*delivery{}}
	if err := d.Server.AddHook(m, nil); err != nil {
		return nil, fmt.Errorf("share hook: %w", err)
	}
	return m, nil
}

// Run matches the live shared subscriptions every Config.Every until ctx
// ends (Close leaves the groups).
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		m.sync(ctx)
	}
}

// Close leaves every group (committing what was acknowledged); what is
// owed goes to the other instances' members.
func (m *Manager) Close(ctx context.Context) error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.mu.Lock()
	m.closed = true
	groups := m.groups
	m.groups = map[string]*group{}
	m.mu.Unlock()
	for _, g := range groups {
		g.stop(ctx)
	}
	return nil
}

// sync starts and stops groups after the live members, and gives each
// the topics its filter draws from.
func (m *Manager) sync(ctx context.Context) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.sweep()
	live := liveMembers(m.d.Server)
	var stopped []*group
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for key, g := range m.groups {
		if _, ok := live[key]; !ok {
			stopped = append(stopped, g)
			delete(m.groups, key)
		}
	}
	for key := range m.since {
		if _, ok := live[key]; !ok && time.Since(m.since[key]) > 10*m.cfg.Every {
			delete(m.since, key) // subscribed and gone between two rounds
		}
	}
	for key, members := range live {
		g := m.groups[key]
		if g == nil {
			name, filter, _ := splitShared(key)
			since, ok := m.since[key]
			if !ok {
				since = time.Now().Add(-m.cfg.Every) // subscribed before this Manager saw it
			}
			delete(m.since, key)
			g = newGroup(m, key, name, filter, since)
			m.groups[key] = g
		}
		g.setMembers(members)
	}
	groups := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, g)
	}
	m.mu.Unlock()
	for _, g := range stopped {
		g.stop(ctx)
	}
	for _, g := range groups {
		topics, err := m.d.Match(ctx, map[string]time.Time{g.filter: g.since})
		if err != nil {
			m.log.Debug("shared subscription's topics not matched", "group", g.key, "err", err)
			continue
		}
		if err := g.consume(ctx, topics); err != nil && ctx.Err() == nil {
			m.log.Warn("share group not joined", "group", g.key, "kafka_group", g.id, "err", err)
		}
	}
}

// liveMembers are the connected clients of each shared subscription.
func liveMembers(server *mqtt.Server) map[string][]string {
	out := map[string][]string{}
	for _, cl := range server.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() {
			continue
		}
		for f := range cl.State.Subscriptions.GetAll() {
			if _, _, ok := splitShared(f); ok {
				out[f] = append(out[f], cl.ID)
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// sendKey is a delivery being put in flight: its group's packet origin
// and the member's client id.
type sendKey struct{ origin, id string }

// publish puts d in flight to member cl under sub: what it owes is
// recorded when mochi gives the packet its id (OnQosPublish), before it
// is written, so an acknowledgement can never come first.
func (m *Manager) publish(cl *mqtt.Client, sub packets.Subscription, pk packets.Packet, d *delivery) (packets.Packet, error) {
	pk.Origin = d.g.origin
	k := sendKey{d.g.origin, cl.ID}
	m.mu.Lock()
	m.sending[k] = d
	m.mu.Unlock()
	out, err := m.d.Server.PublishToClient(cl, sub, pk)
	m.mu.Lock()
	delete(m.sending, k)
	m.mu.Unlock()
	if err != nil && out.PacketID != 0 {
		// Not queued for the member (mochi took it out of flight, or the
		// connection is closed): not owed by it.
		if d := m.take(cl.ID, out.PacketID); d != nil {
			d.g.release(d)
		}
	}
	return out, err
}

// OnQosPublish records what a member owes for a share group's delivery
// mochi has just put in flight.
func (m *Manager) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, resends int) {
	if resends > 0 || pk.Origin == "" {
		return
	}
	m.mu.Lock()
	d := m.sending[sendKey{pk.Origin, cl.ID}]
	if d != nil {
		ids := m.owed[cl.ID]
		if ids == nil {
			ids = map[uint16]*delivery{}
			m.owed[cl.ID] = ids
		}
		ids[pk.PacketID] = d
	}
	m.mu.Unlock()
	if d != nil {
		d.g.owedBy(cl.ID, d)
	}
}

// sweep hands back what members that are gone still owe (one that went
// while a delivery to it was being put in flight).
func (m *Manager) sweep() {
	m.mu.Lock()
	var gone []string
	for id := range m.owed {
		if cl, ok := m.d.Server.Clients.Get(id); !ok || cl.Closed() {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	for _, id := range gone {
		for _, d := range m.takeAll(id) {
			d.g.handBack(d)
		}
	}
}

// take removes what member id owes under pid; nil: nothing.
func (m *Manager) take(id string, pid uint16) *delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.owed[id][pid]
	if d != nil {
		delete(m.owed[id], pid) // the member's map stays: it is owed again soon
	}
	return d
}

// takeAll removes everything member id owes (it went).
func (m *Manager) takeAll(id string) []*delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.owed[id]
	delete(m.owed, id)
	out := make([]*delivery, 0, len(ids))
	for _, d := range ids {
		out = append(out, d)
	}
	return out
}

// ID is the hook's name.
func (m *Manager) ID() string { return "ferry-share" }

// Provides names the hook's events.
func (m *Manager) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnSelectSubscribers, mqtt.OnSubscribed, mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnDisconnect}, []byte{b})
}

// OnSubscribed notes when a shared subscription got its first member
// here: a new group reads its partitions without a commit from then on.
func (m *Manager) OnSubscribed(_ *mqtt.Client, pk packets.Packet, codes []byte) {
	now := time.Now()
	for i, f := range pk.Filters {
		if _, _, ok := splitShared(f.Filter); !ok || i >= len(codes) || codes[i] >= 0x80 {
			continue
		}
		m.mu.Lock()
		if _, ok := m.since[f.Filter]; !ok && m.groups[f.Filter] == nil {
			m.since[f.Filter] = now
		}
		m.mu.Unlock()
	}
}

// OnSelectSubscribers takes the shared subscriptions out of the broker's
// own deliveries: their messages come from the share groups. A topic Ferry
// does not write to Kafka keeps the broker's choice of a member here.
func (m *Manager) OnSelectSubscribers(subs *mqtt.Subscribers, pk packets.Packet) *mqtt.Subscribers {
	if len(subs.Shared) == 0 || m.d.Topics.Excluded(pk.TopicName) {
		return subs
	}
	clear(subs.Shared) // mochi's, gathered for this packet
	clear(subs.SharedSelected)
	return subs
}

// OnQosComplete: a member acknowledged a delivery (PUBACK, or PUBCOMP
// for QoS 2).
func (m *Manager) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	t := pk.FixedHeader.Type
	if (t != packets.Puback && t != packets.Pubcomp) || pk.Created != 0 {
		return // mochi's own acknowledgements of a client's publishes
	}
	if d := m.take(cl.ID, pk.PacketID); d != nil {
		d.g.acked(d)
	}
}

// OnQosDropped: mochi gave a delivery up unacknowledged (its expiry): it
// goes to a member again. A PUBREC with an error code is the member's
// answer: acknowledged.
func (m *Manager) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if d := m.take(cl.ID, pk.PacketID); d != nil {
			d.g.handBack(d)
		}
	case packets.Pubrec, packets.Pubrel:
		if d := m.take(cl.ID, pk.PacketID); d != nil {
			d.g.acked(d)
		}
	}
}

// OnDisconnect: a member went; what it owed goes to another member.
func (m *Manager) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	for _, d := range m.takeAll(cl.ID) {
		d.g.handBack(d)
	}
}
