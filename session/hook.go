package session

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/ratelimit"
	"github.com/ferry-bridge/ferry/state"
)

// sessionHook keeps every MQTT session in the sessions table (package
// state), so that any instance can resume it and a second connection of one
// client id, on any instance, takes the session over.
//
// What is written, and when (each write is acknowledged by Kafka, acks=all,
// before the packet that depends on it leaves):
//   - CONNECT (before CONNACK): a claim: owner = this instance, a new epoch,
//     the client's properties; a resumed session keeps its subscriptions.
//     A connection with Clean Start 0 (3.1.1: CleanSession 0) first reads
//     the table to its end (read-your-writes), so a reconnect right after a
//     write elsewhere sees it; it resumes the session whatever its own
//     Session Expiry Interval (which only says how long the session lasts
//     after this connection). When the table has the session and this broker does not, the
//     session is rebuilt in mochi from the record, and mochi answers Session
//     Present 1.
//   - SUBSCRIBE / UNSUBSCRIBE of a persistent session (before SUBACK /
//     UNSUBACK): the whole subscription set. A failed write refuses the new
//     filters (0x80) or, for UNSUBSCRIBE, drops the connection unanswered
//     so that the client sends it again.
//   - disconnect: persistent: connected=false and the time (expiry counts
//     from it); clean, or MQTT 5 expiry 0: a tombstone. Expiry: a tombstone.
//
// Takeover: every instance reads the table. An instance that reads a claim
// with a higher epoch than its own for a session it serves disconnects
// that client (MQTT 5: 0x8E Session taken over) and forgets the session; a
// record of a former owner that lands after this instance's claim (lower
// epoch, or a tombstone) is overwritten with this instance's record
// (repair on sight). The time to a takeover is the table's read latency.
//
// A session is named by its client id; with Config.SessionOwner it is
// bound to the user who made it, and another user's CONNECT with the id is
// refused before anything of the session changes (admit.go, as are the
// caps on persistent sessions). Without, a connection of another user with
// that id resumes it (or takes it over), under its own ACL. What
// reaches it is checked against that ACL on every path, as mochi checks
// live deliveries: the resumed subscriptions (screenSubs), the in-flight
// messages mochi resends on a resume here (screenLocal), and the replay's
// deliveries (replay.go deliver).
type sessionHook struct {
	mqtt.HookBase
	log     *slog.Logger
	server  *mqtt.Server
	table   *state.Table
	id      string
	timeout time.Duration // one write (Config.WriteTimeout)
	// connectTimeout bounds a CONNECT's read and claim
	// (Config.ConnectTimeout; 0: timeout).
	connectTimeout time.Duration
	metrics        *stateMetrics
	logs           *ratelimit.Limiter

	mu    sync.Mutex
	owned map[string]*ownedSession
	// establishing counts the connections of each client id between
	// OnSessionEstablish's start and their claim's ownership here: a record
	// of the id read meanwhile (a survivor's fence of a dead owner's
	// session) must not drop the copy mochi is about to inherit.
	establishing map[string]int
	lost         *lostSessions // sessions taken over from this instance, for a while
	// beforeWrite, when set (tests, under mu), sees each update before
	// it is written.
	beforeWrite func(*state.Session)
	// afterLookup, when set (tests, under mu), runs in OnSessionEstablish
	// between reading the id's record (and readying the broker's copy of
	// the session) and claiming it.
	afterLookup func(id string)

	inj       *Injections      // coordinates of messages being injected
	replays   *replayer        // nil: no replay (tests of the hook alone)
	deliverer Deliverer        // the caller's side of deliveries (nil: tests of the hook alone)
	wills     *willKeeper      // publishes the Wills of dead instances' clients (nil: off)
	holding   atomic.Int32     // sessions holding live deliveries (replay_hold.go)
	tracking  atomic.Int32     // sessions tracking their unwritten live deliveries (replay_hold.go)
	reverse   *ReverseProgress // caps positions at what the reverse path handed out (nil: no reverse path)
	canRead   ReadCheck        // the MQTT ACL's read check (nil: everyone may read everything)
	admit     *admission       // session owner and caps (nil: none)
	copies    liveCopies       // live deliveries that repeat a replay's, not written (replay_copies.go)
}

// ownedSession is a session this instance owns: the connection that
// claimed it (nil for one loaded at start) and the record last written.
type ownedSession struct {
	cl  *mqtt.Client
	wmu sync.Mutex // orders this session's writes
	rec state.Session
	pos *sessionPositions // nil for a clean session

	// resumed holds a resumed session's subscriptions while its replay
	// catches up (replay.go). They are in the broker's index from the
	// CONNACK on (Session Present 1: the subscriptions exist), but until
	// the replay's first pass ends (early) a live QoS 1/2 delivery of a
	// Kafka record is discarded as a copy: the replay brings it, in order
	// (its first pass, or its last, which reads what came meanwhile). QoS 0
	// is not queued and not replayed: it is delivered live at once.
	smu     sync.Mutex
	resumed []state.Subscription
	early   atomic.Bool

	live liveHold // live deliveries wait while the replay's last pass runs
}

// awaitWrite returns once a write of o in progress (its writes hold wmu
// from their ownership check to Kafka's answer) has finished.
func (o *ownedSession) awaitWrite() {
	o.wmu.Lock()
	o.wmu.Unlock()
}

func (o *ownedSession) takeResumed() []state.Subscription {
	o.smu.Lock()
	defer o.smu.Unlock()
	r := o.resumed
	o.resumed = nil
	return r
}

func (o *ownedSession) resumedSubs() []state.Subscription {
	o.smu.Lock()
	defer o.smu.Unlock()
	return append([]state.Subscription(nil), o.resumed...)
}

func newSessionHook(log *slog.Logger, server *mqtt.Server, table *state.Table, id string, timeout time.Duration, m *stateMetrics) *sessionHook {
	log = log.With("component", "sessions")
	return &sessionHook{log: log, server: server, table: table, id: id, timeout: timeout, metrics: m,
		logs: ratelimit.New(log, 10*time.Second), owned: make(map[string]*ownedSession),
		establishing: make(map[string]int),
		lost:         newLostSessions(max(time.Minute, 4*timeout))}
}

func (h *sessionHook) ID() string { return "ferry-sessions" }

func (h *sessionHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
		mqtt.OnDisconnect, mqtt.OnClientExpired, mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped,
		mqtt.OnPacketEncode, mqtt.OnPacketSent, mqtt.OnPublishDropped:
		return true
	}
	return false
}

// OnSessionEstablish runs after authentication, before mochi looks for an
// earlier session and writes CONNACK.
func (h *sessionHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.mu.Lock()
	h.establishing[cl.ID]++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if h.establishing[cl.ID]--; h.establishing[cl.ID] <= 0 {
			delete(h.establishing, cl.ID)
		}
		h.mu.Unlock()
	}()
	// A write of the id's earlier connection here on its way (its
	// disconnect record) is waited for: the lookup below then reads it.
	h.mu.Lock()
	earlier := h.owned[cl.ID]
	h.mu.Unlock()
	if earlier != nil {
		earlier.awaitWrite()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(h.connectTimeout, h.timeout))
	defer cancel()
	start := time.Now()
	// Clean Start 0 (3.1.1: CleanSession 0) resumes the session there is,
	// whatever the new CONNECT's Session Expiry Interval: that only says
	// how long the session lasts after this connection [MQTT-3.1.2-6].
	pers, resume := Persistent(cl), !pk.Connect.Clean
	if resume {
		if err := h.table.Sync(ctx); err != nil {
			if pers {
				h.refuse(cl, err)
				return
			}
			// The session ends with this connection anyway: resume what
			// this instance has read rather than refuse (a v5 client with
			// Clean Start 0 and no expiry is paho.golang's default).
			h.logs.Warn("connect-sync:"+err.Error(), "sessions table not read to its end: resuming from what this instance has read",
				"client", cl.ID, "err", err)
		}
	}
	prev, err := h.lookup(ctx, cl.ID)
	if err != nil {
		if pers {
			h.refuse(cl, err)
			return
		}
		// A clean session's claim only needs a higher epoch: the clock's.
		h.logs.Warn("connect-read:"+err.Error(), "session record not read: a clean session starts without it", "client", cl.ID, "err", err)
	}
	existing, _ := h.server.Clients.Get(cl.ID)
	if code, err := h.admit.check(cl, existing, prev, pers, start, h.maxExpiry()); err != nil {
		// Before anything of the session changes: the id's session and
		// client stay as they are.
		h.deny(cl, code, err)
		return
	}
	if existing != nil && existing != cl {
		// Before mochi moves its messages in flight here (to resend them).
		h.dropCopies(existing, false)
	}
	resumed := resume && prev != nil && !prev.Clean && !prev.Expired(start, h.maxExpiry())
	// A resumed session keeps its record (subscriptions, queue) while
	// connected, also when it ends with this connection (expiry 0: its
	// record is deleted at disconnect).
	keep := pers || resumed
	rec := h.recordOf(cl, keep)
	rec.Epoch = state.NextEpoch(epochOf(prev), start)
	o := &ownedSession{cl: cl}
	if keep {
		o.pos = newSessionPositions(nil, nil, 0, h.reverse)
	}
	switch {
	case resumed:
		rec.Subs = h.screenSubs(cl, prev)
		h.mu.Lock()
		old := h.owned[cl.ID]
		h.mu.Unlock()
		if _, here := h.server.Clients.Get(cl.ID); here && old != nil && old.pos != nil {
			// This broker served the session: its positions are fresher than
			// the record, and mochi resends its in-flight messages itself.
			o.pos = old.pos
			o.pos.inherit()
		} else {
			o.pos = newSessionPositions(prev.Positions, prev.Pending, prev.Horizon, h.reverse)
			o.pos.notLive()
		}
		o.resumed = rec.Subs
		h.prepareLocal(cl.ID, rec.Subs)
		o.early.Store(len(rec.Subs) > 0 && h.replays != nil)
		h.metrics.resumed.Inc()
	case resume:
		// Nothing to resume in Kafka: an offline copy this broker still
		// holds for the id is stale (expired or ended elsewhere).
		if existing, ok := h.server.Clients.Get(cl.ID); ok && existing.Closed() {
			h.dropLocal(cl.ID, existing, false)
		}
	}
	if !pk.Connect.Clean {
		// mochi is about to take over this broker's copy of the session, if
		// any: its subscriptions and in-flight messages.
		if existing, ok := h.server.Clients.Get(cl.ID); ok {
			h.screenLocal(cl, existing, o.pos)
		}
	}
	h.mu.Lock()
	after := h.afterLookup
	h.mu.Unlock()
	if after != nil {
		after(cl.ID)
	}
	var gen uint64
	if o.pos != nil {
		gen = o.pos.fill(&rec)
	}
	o.rec = rec
	o.wmu.Lock()
	defer o.wmu.Unlock()
	h.mu.Lock()
	before := h.owned[cl.ID]
	h.owned[cl.ID] = o
	h.mu.Unlock()
	if before != nil && before != o {
		// A write of the id's earlier connection here (its disconnect
		// record, a checkpoint) may have passed its ownership check before
		// the line above and be on its way: wait for it, so that it lands
		// before this claim and not after this session's end. Its later
		// writes see the claim and do nothing.
		before.awaitWrite()
	}
	if !keep {
		// A clean session's claim only fences a second connection of the
		// id elsewhere: written without waiting, so that clean clients
		// connect while Kafka is unreachable (they can still publish QoS 0
		// and get negative acknowledgements).
		h.putAsync(&rec)
		return
	}
	if err := h.put(ctx, &rec); err != nil {
		h.mu.Lock()
		if h.owned[cl.ID] == o {
			delete(h.owned, cl.ID)
		}
		h.mu.Unlock()
		h.refuse(cl, err)
		return
	}
	if o.pos != nil {
		o.pos.wrote(gen)
	}
	h.metrics.connectWrite.Observe(time.Since(start).Seconds())
}

// OnSessionEstablished runs after CONNACK: a resumed session's messages
// are replayed from Kafka.
func (h *sessionHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	o := h.ownedBy(cl)
	if o == nil || h.replays == nil {
		return
	}
	if len(o.resumedSubs()) == 0 {
		if o.pos != nil {
			// Nothing was owed while it was away (no subscription, or none its
			// user may keep: screenSubs), and no replay resends what its record
			// has in flight: live now.
			o.pos.endResend()
			o.pos.caughtUp(0)
		}
		return
	}
	if h.deliverer != nil {
		h.deliverer.Subscribed(cl)
	}
	h.inj.replaying.Add(1)
	go h.replays.run(o, time.Now())
}

// mayRead reports whether cl's user may subscribe to a filter or receive a
// message of a topic (ReadCheck).
func (h *sessionHook) mayRead(cl *mqtt.Client, topic string) bool {
	return h.canRead == nil || h.canRead(cl, topic)
}

// screenSubs returns the subscriptions of prev that cl's user may keep:
// each filter is checked against its ACL as a SUBSCRIBE's filters are. The
// others leave the session (the claim's record has not them), counted and
// logged: whoever resumes a session gets what its own ACL allows, and a
// subscription its user could not make is not handed to it.
func (h *sessionHook) screenSubs(cl *mqtt.Client, prev *state.Session) []state.Subscription {
	if h.canRead == nil {
		return prev.Subs
	}
	out := make([]state.Subscription, 0, len(prev.Subs))
	var denied []string
	for _, s := range prev.Subs {
		if h.canRead(cl, s.Filter) {
			out = append(out, s)
		} else {
			denied = append(denied, s.Filter)
		}
	}
	h.subsDenied(cl, prev.Username, denied)
	return out
}

// subsDenied counts and logs the resumed subscriptions dropped for cl;
// user is the session's former user.
func (h *sessionHook) subsDenied(cl *mqtt.Client, user []byte, filters []string) {
	if len(filters) == 0 {
		return
	}
	h.metrics.subsDenied.Add(float64(len(filters)))
	h.logs.Warn("resume-acl:"+cl.ID, "resumed session's subscriptions dropped: the connecting user's ACL denies them",
		"client", cl.ID, "username", string(cl.Properties.Username), "session_username", string(user), "filters", filters)
}

// screenLocal takes out of this broker's copy of a session, which mochi
// hands to cl (its subscriptions, and its in-flight messages, which mochi
// resends at once), what cl's user may not read; the session's positions
// (pos; nil: none) forget those deliveries. A PUBLISH in flight whose topic
// cannot be checked (mochi keeps no name for one sent under a topic alias)
// is taken out too and handed to the replay, which reads it from Kafka and
// resends it if the ACL allows (replay.go deliver). A resume from the
// record (prepareLocal) has only the resumed subscriptions here, screened
// already (screenSubs).
func (h *sessionHook) screenLocal(cl, existing *mqtt.Client, pos *sessionPositions) {
	if h.canRead == nil {
		return
	}
	var denied []string
	for f := range existing.State.Subscriptions.GetAll() {
		if h.canRead(cl, f) {
			continue
		}
		denied = append(denied, f)
		if h.server.Topics.Unsubscribe(f, cl.ID) {
			atomic.AddInt64(&h.server.Info.Subscriptions, -1)
		}
		existing.State.Subscriptions.Delete(f)
	}
	h.subsDenied(cl, existing.Properties.Username, denied)
	for _, pk := range existing.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type != packets.Publish || pk.TopicName != "" && h.canRead(cl, pk.TopicName) {
			continue
		}
		if existing.State.Inflight.Delete(pk.PacketID) {
			atomic.AddInt64(&h.server.Info.Inflight, -1)
		}
		switch {
		case pos == nil:
		case pk.TopicName == "":
			pos.handBack(pk.PacketID)
		default:
			pos.forget(pk.PacketID)
		}
		if h.deliverer != nil {
			h.deliverer.TakenOutOfFlight(existing, pk.PacketID)
		}
	}
}

// refuse answers CONNECT with Server unavailable: the session could not be
// read or claimed.
func (h *sessionHook) refuse(cl *mqtt.Client, err error) {
	h.logs.Warn("connect:"+err.Error(), "connection refused: session state not readable or writable in Kafka", "client", cl.ID, "err", err)
	h.metrics.refused.Inc()
	_ = h.server.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
	cl.Stop(fmt.Errorf("%w: session state: %v", ErrKafkaUnavailable, err))
}

// OnSubscribed runs after mochi added the subscriptions, before it writes
// SUBACK: the set is made durable first. codes is the SUBACK's own slice.
func (h *sessionHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	o := h.ownedBy(cl)
	if o == nil {
		return
	}
	start := time.Now()
	o.wmu.Lock() // o.rec too: a checkpoint rewrites it
	defer o.wmu.Unlock()
	if o.rec.Clean {
		return
	}
	h.holdResubscribed(o, cl, pk, codes)
	before := o.rec.Subs
	err := h.update(o, func(r *state.Session) { r.Subs = h.subsFor(o, cl, before) })
	if err == nil {
		h.metrics.subscribeWrite.Observe(time.Since(start).Seconds())
		return
	}
	h.logs.Warn("subscribe:"+cl.ID, "subscription refused: not written to Kafka", "client", cl.ID, "err", err)
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= 0x80 {
			continue
		}
		codes[i] = packets.ErrUnspecifiedError.Code
		// Back to what Kafka holds for this filter.
		if old, ok := findSub(before, f.Filter); ok {
			sb := toPacketSub(old)
			h.server.Topics.Subscribe(cl.ID, sb)
			cl.State.Subscriptions.Add(sb.Filter, sb)
		} else if h.server.Topics.Unsubscribe(f.Filter, cl.ID) {
			atomic.AddInt64(&h.server.Info.Subscriptions, -1)
			cl.State.Subscriptions.Delete(f.Filter)
		}
	}
}

// holdResubscribed: a filter the client subscribes to again while its
// resumed subscriptions wait for the replay keeps its new options among
// them: the replay delivers by them, and puts them in the broker's index
// again when its first pass ends (live QoS 1/2 deliveries wait for it as
// the resumed ones do: ownedSession.early).
func (h *sessionHook) holdResubscribed(o *ownedSession, cl *mqtt.Client, pk packets.Packet, codes []byte) {
	o.smu.Lock()
	defer o.smu.Unlock()
	if len(o.resumed) == 0 {
		return
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= 0x80 {
			continue
		}
		for j := range o.resumed {
			if o.resumed[j].Filter != f.Filter {
				continue
			}
			since := o.resumed[j].Since
			o.resumed[j] = state.Subscription{Filter: f.Filter, QoS: codes[i], Identifier: f.Identifier, NoLocal: f.NoLocal,
				RetainAsPublished: f.RetainAsPublished, RetainHandling: f.RetainHandling, Since: since}
		}
	}
}

// OnUnsubscribed runs before UNSUBACK. A failed write stops the connection,
// so the client never gets the UNSUBACK and sends the UNSUBSCRIBE again.
func (h *sessionHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	o := h.ownedBy(cl)
	if o == nil {
		return
	}
	o.wmu.Lock() // o.rec too: a checkpoint rewrites it
	defer o.wmu.Unlock()
	if o.rec.Clean {
		return
	}
	o.smu.Lock()
	for _, f := range pk.Filters {
		for i := 0; i < len(o.resumed); i++ {
			if o.resumed[i].Filter == f.Filter {
				o.resumed = append(o.resumed[:i], o.resumed[i+1:]...)
				i--
			}
		}
	}
	o.smu.Unlock()
	before := o.rec.Subs
	if err := h.update(o, func(r *state.Session) { r.Subs = h.subsFor(o, cl, before) }); err != nil {
		h.logs.Warn("unsubscribe:"+cl.ID, "unsubscribe not written to Kafka: disconnecting the client so that it resends", "client", cl.ID, "err", err)
		cl.Stop(fmt.Errorf("%w: session state: %v", ErrKafkaUnavailable, err))
	}
}

// OnDisconnect records that the client went, or ends a clean session.
func (h *sessionHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.Net.Inline {
		return
	}
	h.dropCopies(cl, true) // not written now; a resume here would resend them
	if cl.IsTakenOver() {
		return
	}
	o := h.ownedBy(cl)
	if o == nil {
		return // taken over, here or elsewhere
	}
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if expire || o.rec.Clean {
		h.end(o)
		return
	}
	if o.pos != nil {
		o.pos.wentOffline()
	}
	now := time.Now()
	err := h.update(o, func(r *state.Session) {
		r.Connected, r.Disconnected = false, now.UnixMilli()
		r.Expiry = h.expiryOf(cl)
		r.Will = willOf(cl)
	})
	if err != nil {
		h.logs.Warn("disconnect:"+cl.ID, "session disconnect not written to Kafka (expiry counts from the last write)", "client", cl.ID, "err", err)
	}
	// Offline, the session's queue is its position: nothing more is queued
	// for it in memory. Its subscriptions leave the broker's index.
	for f := range cl.State.Subscriptions.GetAll() {
		if h.server.Topics.Unsubscribe(f, cl.ID) {
			atomic.AddInt64(&h.server.Info.Subscriptions, -1)
		}
	}
	if err == nil {
		h.release(o, cl)
	}
	// Else its record is older than this broker's copy: the copy stays,
	// for a resume here (mochi resends its messages in flight) and for
	// its expiry (OnClientExpired).
}

// release forgets an offline session whose record (just written) holds
// all of it: subscriptions, positions, the deliveries in flight (resent
// from the record, with their packet ids, on a resume here or anywhere).
// The broker keeps no client for it and this instance no ownedSession: an
// offline session costs this instance what it costs every other, its
// table row. Its expiry is the expired-session sweep's (wills_sweep.go), as for
// a session of a dead instance. o.wmu is held.
func (h *sessionHook) release(o *ownedSession, cl *mqtt.Client) {
	h.mu.Lock()
	if h.owned[cl.ID] != o {
		h.mu.Unlock()
		return // taken over meanwhile
	}
	delete(h.owned, cl.ID)
	h.mu.Unlock()
	if cl.IsTakenOver() {
		return // a new connection here inherits the client
	}
	cl.ClearInflights()
	if cur, ok := h.server.Clients.Get(cl.ID); ok && cur == cl {
		h.server.Clients.Delete(cl.ID)
	}
}

// OnQosPublish records a delivery to a persistent session with the Kafka
// coordinate of its message (positions.go).
func (h *sessionHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, resends int) {
	if resends > 0 || pk.FixedHeader.Type != packets.Publish {
		return
	}
	if o := h.ownedBy(cl); o != nil && o.pos != nil {
		// mochi resends a resumed session's in-flight messages itself, DUP
		// set, reported here with resends 0: the coordinate recorded at the
		// first send stays (an injection of the same origin running now is
		// another message).
		if pk.FixedHeader.Dup && o.pos.isPending(pk.PacketID) {
			return
		}
		m, ok := h.inj.message(pk.Origin)
		if !pk.FixedHeader.Dup {
			h.copies.unmark(cl, pk.PacketID)
			// The injected message itself (not a retained one mochi sends
			// on a SUBSCRIBE meanwhile), and its replay delivered it.
			if ok && m.topic == pk.TopicName && !pk.FixedHeader.Retain && (o.early.Load() || o.pos.liveCopy(m.c, pk.TopicName)) &&
				h.discardCopy(cl, pk) {
				return
			}
		}
		c := m.c
		if ok {
			o.pos.sent(pk.PacketID, c, pk.FixedHeader.Qos)
		}
		if h.tracking.Load() != 0 { // no replay anywhere: skip the hold's lock
			o.live.enqueued(pk.PacketID, c)
		}
	}
}

// OnPublishDropped: mochi dropped a delivery and never redelivers it:
// the client's outbound queue (mqtt.client_writes_pending) was full (after
// mochi had put it in flight and freed its packet id again), or the client
// had mochi's MaximumInflight deliveries unacknowledged already (FERRY.md
// change 10). For a
// persistent session the message stays owed: its position stops at it
// until a replay reads past it, so the client's next resume (here or
// anywhere) delivers it. The connection stays: a running replay may bring
// the message anyway (it reads Kafka), and a client that cannot keep up is
// ended by mqtt.write_timeout.
func (h *sessionHook) OnPublishDropped(cl *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 {
		return
	}
	o := h.ownedBy(cl)
	if o == nil || o.pos == nil {
		return
	}
	if c, ok := h.inj.of(pk.Origin); ok && o.pos.dropped(c) {
		h.logs.Warn("dropped:"+cl.ID, "persistent session's delivery dropped (its outbound queue or in-flight store is full): it comes with the session's next resume",
			"client", cl.ID, "client_writes_pending", h.server.Options.Capabilities.MaximumClientWritesPending,
			"max_inflight", h.server.Options.Capabilities.MaximumInflight)
	}
}

// OnQosComplete records the client's acknowledgement of a delivery: its
// PUBACK (QoS 1) or PUBCOMP (QoS 2), see ClientAck.
func (h *sessionHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if ClientAck(&pk) {
		h.acked(cl, pk.PacketID)
	}
}

// OnQosDropped: mochi gave up a packet in flight. A PUBLISH it dropped
// (the in-flight sweep's drop of a delivery whose expiry passed, or a
// clearing of the client's in-flight packets) is not an acknowledgement:
// the session's position stays at the message, as for OnPublishDropped,
// so its next resume reads it again (and leaves it out if it has expired
// by then, replay.go), counted. A PUBREC with an error reason code is the
// client's answer (MQTT 5 4.13.2: the message is not sent again), and a
// PUBREL means the client had the message: acknowledged, as before. The
// sweep reports each drop twice, the second time as a bare packet id
// (mochi's Server.clearExpiredInflights): that one is ignored (the id may
// be another delivery's by then).
func (h *sessionHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if o := h.ownedBy(cl); o != nil && o.pos != nil && o.pos.droppedID(pk.PacketID) {
			h.metrics.inflightDropped.Inc()
		}
	case packets.Pubrec, packets.Pubrel:
		h.acked(cl, pk.PacketID)
	}
}

func (h *sessionHook) acked(cl *mqtt.Client, pid uint16) {
	if o := h.ownedBy(cl); o != nil && o.pos != nil {
		o.pos.acked(pid)
	}
}

// OnClientExpired ends an offline session this instance owns.
func (h *sessionHook) OnClientExpired(cl *mqtt.Client) {
	h.mu.Lock()
	o := h.owned[cl.ID]
	h.mu.Unlock()
	if o == nil {
		return
	}
	o.wmu.Lock()
	defer o.wmu.Unlock()
	h.end(o)
}

// dropLocal forgets this broker's copy of a session another connection
// owns now: the client, if connected, is disconnected (0x8E when takenOver
// and MQTT 5), its subscriptions and in-flight messages go. cl, when not
// nil, limits it to that connection.
func (h *sessionHook) dropLocal(id string, cl *mqtt.Client, takenOver bool) {
	existing, ok := h.server.Clients.Get(id)
	if !ok || cl != nil && existing != cl {
		return
	}
	if !existing.Closed() {
		code := packets.ErrSessionTakenOver
		if !takenOver {
			code = packets.ErrUnspecifiedError
			h.logs.Warn("stale:"+id, "disconnecting a client: the sessions topic says another instance owns its session",
				"client", id)
		}
		_ = h.server.DisconnectClient(existing, code)
	}
	h.server.UnsubscribeClient(existing)
	existing.ClearInflights()
	if cur, ok := h.server.Clients.Get(id); ok && cur == existing {
		h.server.Clients.Delete(id)
	}
}

// prepareLocal readies the broker for a resume that mochi will see as
// Session Present: an offline or connected copy of the session here gives
// up its subscriptions for subs, the resumed ones (mochi resends its
// in-flight messages); with no copy, a bare disconnected client stands in
// for the session so that mochi inherits it. mochi moves the copy's
// subscriptions to the new connection before its CONNACK, into the
// broker's index: live from the CONNACK on (ownedSession.early).
func (h *sessionHook) prepareLocal(id string, subs []state.Subscription) {
	existing, ok := h.server.Clients.Get(id)
	if !ok {
		existing = h.server.NewClient(nil, "", id, false)
		existing.Stop(packets.ErrSessionTakenOver)
		h.server.Clients.Add(existing)
	}
	for f := range existing.State.Subscriptions.GetAll() {
		if h.server.Topics.Unsubscribe(f, id) {
			atomic.AddInt64(&h.server.Info.Subscriptions, -1)
		}
		existing.State.Subscriptions.Delete(f)
	}
	for _, s := range subs {
		sb := toPacketSub(s)
		existing.State.Subscriptions.Add(sb.Filter, sb)
	}
}

// ownedBy returns the session cl's connection owns, or nil.
func (h *sessionHook) ownedBy(cl *mqtt.Client) *ownedSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.owned[cl.ID]; o != nil && (o.cl == cl || o.cl == nil) {
		return o
	}
	return nil
}

// subsFor is the subscription set to write for o: the broker's (each
// keeping the time it was first made) and those still waiting for the
// replay to catch up.
func (h *sessionHook) subsFor(o *ownedSession, cl *mqtt.Client, before []state.Subscription) []state.Subscription {
	now := time.Now().UnixMilli() - sinceSlack.Milliseconds()
	all := cl.State.Subscriptions.GetAll()
	out := make([]state.Subscription, 0, len(all))
	for _, s := range all {
		since := now
		if old, ok := findSub(before, s.Filter); ok && old.Since > 0 {
			since = old.Since
		}
		out = append(out, state.Subscription{Filter: s.Filter, QoS: s.Qos, Identifier: s.Identifier,
			NoLocal: s.NoLocal, RetainAsPublished: s.RetainAsPublished, RetainHandling: s.RetainHandling, Since: since})
	}
	for _, r := range o.resumedSubs() {
		if _, ok := all[r.Filter]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// sinceSlack is taken off a subscription's time: a resume may deliver
// messages Kafka appended up to this long before the subscription (clocks
// of bridge hosts and brokers differ), rather than miss one after it.
const sinceSlack = time.Second

func findSub(subs []state.Subscription, filter string) (state.Subscription, bool) {
	for _, s := range subs {
		if s.Filter == filter {
			return s, true
		}
	}
	return state.Subscription{}, false
}

func toPacketSub(s state.Subscription) packets.Subscription {
	return packets.Subscription{Filter: s.Filter, Qos: s.QoS, Identifier: s.Identifier, NoLocal: s.NoLocal,
		RetainAsPublished: s.RetainAsPublished, RetainHandling: s.RetainHandling}
}

// Persistent reports whether cl's session outlives its connection.
func Persistent(cl *mqtt.Client) bool {
	if cl.Net.Inline {
		return false
	}
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

// ClientAck reports whether a completion mochi reports to OnQosComplete is
// the client's acknowledgement of a delivery: the PUBACK or PUBCOMP it
// read from the wire. mochi also reports completions of the client's own
// publishes there: the PUBREL of an inbound QoS 2 publish, and
// acknowledgements it built itself (the PUBACK of an inbound QoS 1 publish
// it answered, a PUBCOMP it resends from a resumed session's in-flight
// store). Their packet id is the client's and may equal a delivery's; mochi
// stamps what it builds with Created, a packet read from the wire has none.
//
// Not OnPacketRead: that hook runs for every packet a client sends, so
// each PUBLISH would pay a call and two copies of the 800-byte packet per
// hook on the forward path's hottest loop.
func ClientAck(pk *packets.Packet) bool {
	t := pk.FixedHeader.Type
	return (t == packets.Puback || t == packets.Pubcomp) && pk.Created == 0
}
