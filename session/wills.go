package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/ferry-bridge/ferry/state"
)

// The willKeeper (its state, its loop, its index of the sessions table)
// and the Wills it publishes for the clients of dead instances. Its view of
// the instances is wills_liveness.go, its expiry sweep wills_sweep.go.

// willKeeper publishes the Will of a client whose instance died: the
// session record (sessions table) still says Connected, with the dead
// instance as Owner, and holds the client's Will.
//
// Liveness comes from the heartbeats every instance appends to
// _ferry_instances (package instance): an instance is dead once none of its
// heartbeats has been read here for state.instance_lapse, or at once when
// its last heartbeat says it stopped (graceful stop). Times are this
// instance's own clock (when it read a heartbeat), never another host's.
// An instance never heard from counts from the moment this one first read
// its own heartbeat back (the reader starts a minute in the past, so any
// live instance is heard from well within the lapse). Nothing is decided
// while this instance's own heartbeats are not read back: a reader that
// lags, or a Kafka this instance cannot reach, must not make every other
// instance look dead.
//
// For each connected session of a dead owner, one survivor acts: the one
// that rendezvous hashing of the client id picks among the live instances
// of this cluster (heartbeats naming the same sessions topic: several
// clusters may share one Kafka; every survivor computes the same choice
// from the same heartbeats; when two briefly disagree, the fence below
// keeps one). It
//  1. reads the table to its end and checks the record is unchanged;
//  2. writes a fence: the record with Connected false, Disconnected now,
//     Epoch one past the dead owner's and WillBy = itself. A reconnecting
//     client's claim (NextEpoch: the wall clock) outranks it and resumes
//     the session; an owner that was only cut off reads a higher epoch and
//     drops its client, as for a takeover;
//  3. waits to read its fence back: any other record read before it (a
//     claim, another survivor's fence) means someone else acts: it gives up;
//  4. waits for the MQTT 5 Will Delay Interval, counted from the owner's
//     last heartbeat, giving up if the client reconnects meanwhile;
//  5. publishes the Will the way mochi publishes one (Kafka, the retained
//     table if flagged, and this broker's subscribers), if the session's
//     user may publish to its topic under this instance's ACL (the record
//     names the user);
//  6. deletes the record of a session that ends with its connection
//     (clean, or expiry 0).
//
// An instance restarted with the same id treats its own sessions claimed
// before it started, and still marked connected, the same way (its dead
// run's clients), without waiting for a lapse.
//
// The same liveness ends expired sessions nobody else ends (the sweep,
// wills_sweep.go): a disconnected session past its expiry is ended by its
// owner (the session hook: checkpoints.go expire); when the owner is dead
// or gone (a fence above leaves the dead owner's id in the record), the
// survivor rendezvous hashing picks deletes its record; a record of this
// instance that it does not hold (a dead run's) it deletes itself. A client
// claiming the session meanwhile is not harmed: its owner reads the
// tombstone after its claim and writes its record again (repair on sight,
// table.go onChange).
type willKeeper struct {
	log      *slog.Logger
	id       string
	sessions string    // this cluster's sessions topic
	start    time.Time // this run's start: own claims before it are a dead run's
	lapse    time.Duration
	timeout  time.Duration // one table write
	table    *state.Table
	publish  func(client string, protocol byte, w mqtt.Will)
	// mayWrite is the MQTT ACL's publish check (nil: everyone may publish
	// everything): a Will is published only if its user may publish it.
	mayWrite WriteCheck
	// owns reports whether this instance owns a session now (the session
	// hook ends those itself); maxExpiry caps every record's expiry
	// (mqtt.max_session_expiry, seconds).
	owns      func(client string) bool
	maxExpiry uint32
	metrics   *stateMetrics
	slots     chan struct{}
	stop      <-chan struct{}
	wg        sync.WaitGroup

	mu       sync.Mutex
	beats    map[string]instanceBeat
	ownFirst time.Time // first own heartbeat read back
	ownLast  time.Time
	pending  map[string]*pendingWill
	handled  map[string]int64   // client id -> epoch of the fence this instance wrote
	conn     map[string]connRef // sessions marked connected, as read (saw)
	offline  map[string]offRef  // sessions marked disconnected, as read (saw)
	owners   map[string]string  // the owners' ids, one string each (intern)

	sweeping atomic.Bool // a sweep is running
}

// connRef is who holds a session marked connected.
type connRef struct {
	owner string
	epoch int64
}

// pendingWill is a dead owner's session this instance is acting on.
type pendingWill struct {
	epoch     int64         // the dead owner's claim
	owner     string        // the dead owner
	mine      chan struct{} // closed when this instance's fence is read back
	mineSeen  bool
	cancel    chan struct{} // closed when someone else acts or the client is back
	cancelled bool
}

// maxWillWorkers bounds the sessions handled at once (each does a few
// table writes).
const maxWillWorkers = 16

func newWillKeeper(log *slog.Logger, id, sessions string, start time.Time, lapse, timeout time.Duration, m *stateMetrics,
	stop <-chan struct{}) *willKeeper {
	return &willKeeper{log: log.With("component", "wills"), id: id, sessions: sessions, start: start, lapse: lapse, timeout: timeout,
		metrics: m, slots: make(chan struct{}, maxWillWorkers), stop: stop,
		beats: make(map[string]instanceBeat), pending: make(map[string]*pendingWill), handled: make(map[string]int64),
		conn: make(map[string]connRef), offline: make(map[string]offRef), owners: make(map[string]string)}
}

// run scans the sessions table until stop, once it is loaded.
func (w *willKeeper) run() {
	select {
	case <-w.table.Loaded():
	case <-w.stop:
		return
	}
	t := time.NewTicker(min(time.Second, w.lapse/4))
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		w.scan(now)
		w.sweep(now)
	}
}

// wait waits for the sessions being handled (after stop).
func (w *willKeeper) wait() { w.wg.Wait() }

// saw sees every record of the sessions table as it is read (the table's
// reader goroutine, in log order): it keeps the index of connected
// sessions, and tells a pending session whether its fence or someone
// else's record came first.
func (w *willKeeper) saw(k string, rec *state.Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec != nil && rec.Connected {
		w.conn[k] = connRef{owner: w.intern(rec.Owner), epoch: rec.Epoch}
	} else {
		delete(w.conn, k)
	}
	if at := expiresAt(rec, w.maxExpiry); at != 0 {
		w.offline[k] = offRef{owner: w.intern(rec.Owner), epoch: rec.Epoch, expires: at}
	} else {
		delete(w.offline, k)
	}
	if e, ok := w.handled[k]; ok && (rec == nil || rec.Epoch > e) {
		delete(w.handled, k) // the session moved on (reconnected, or ended)
	} else if ok && rec.Connected && rec.Epoch < e {
		w.refence(k, e)
	}
	p := w.pending[k]
	if p == nil {
		return
	}
	fence := rec != nil && rec.WillBy != "" && !rec.Connected && rec.Epoch == p.epoch+1
	owners := rec != nil && rec.Owner == p.owner && rec.Epoch == p.epoch && rec.Connected
	switch {
	case p.cancelled:
	case fence && rec.WillBy == w.id && !p.mineSeen:
		p.mineSeen = true
		close(p.mine)
	case fence && p.mineSeen:
		// Another survivor's fence after ours: it gives up.
	case owners && !p.mineSeen:
		// The dead owner's own record, before our fence.
	default:
		p.cancelled = true
		close(p.cancel)
	}
}

// intern returns one string per instance id (w.mu held): the offline
// sessions of a fleet each name one of a few owners, and a decoded record's
// owner is a fresh string every time.
func (w *willKeeper) intern(owner string) string {
	if s, ok := w.owners[owner]; ok {
		return s
	}
	if len(w.owners) >= 4096 { // ids of instances long gone: start again
		clear(w.owners)
	}
	w.owners[owner] = owner
	return owner
}

func (w *willKeeper) lookup(ctx context.Context, k string) *state.Session {
	v, ok, err := w.table.Read(ctx, k)
	if err != nil || !ok {
		return nil
	}
	s, err := state.DecodeSession(v)
	if err != nil {
		return nil
	}
	return s
}

// scan starts handling every connected session of a dead owner that this
// instance is chosen for.
func (w *willKeeper) scan(now time.Time) {
	w.mu.Lock()
	if !w.ready(now) {
		w.mu.Unlock()
		return
	}
	live := w.members(now)
	for k, c := range w.conn {
		var since time.Time
		switch {
		case w.pending[k] != nil || w.handled[k] > c.epoch:
			continue
		case c.owner == w.id:
			if c.epoch >= w.start.UnixMilli() {
				continue // this run's own connection
			}
			since = w.start // a dead run of this instance
		case w.alive(c.owner, now):
			continue
		case ChooseInstance(k, live) != w.id:
			continue
		default:
			since = w.lastHeard(c.owner)
		}
		p := &pendingWill{epoch: c.epoch, owner: c.owner, mine: make(chan struct{}), cancel: make(chan struct{})}
		w.pending[k] = p
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.handle(k, since, p)
		}()
	}
	w.mu.Unlock()
}

// handle fences one dead owner's session and publishes its Will.
func (w *willKeeper) handle(k string, since time.Time, p *pendingWill) {
	defer func() {
		w.mu.Lock()
		if w.pending[k] == p {
			delete(w.pending, k)
		}
		w.mu.Unlock()
	}()
	// A slot for the table writes only: a long Will Delay Interval holds
	// none.
	select {
	case w.slots <- struct{}{}:
	case <-w.stop:
		return
	}
	log := w.log.With("client", k, "owner", p.owner, "epoch", p.epoch)
	rec := w.fence(k, p, log)
	<-w.slots
	if rec == nil {
		return
	}
	var will mqtt.Will
	if len(rec.Will) > 0 {
		if err := json.Unmarshal(rec.Will, &will); err != nil {
			log.Warn("unreadable Will in a session record: not published", "err", err)
		}
	}
	if will.TopicName != "" {
		at := since.Add(time.Duration(will.WillDelayInterval) * time.Second)
		timer := time.NewTimer(time.Until(at))
		select {
		case <-timer.C:
		case <-p.cancel:
			timer.Stop()
			log.Debug("Will not published: the client is back before its Will Delay Interval")
			return
		case <-w.stop:
			timer.Stop()
			log.Warn("Will not published: this instance is stopping within the client's Will Delay Interval")
			return
		}
		if w.isCancelled(p) { // a select picks any ready case
			log.Debug("Will not published: the client is back")
			return
		}
		if w.mayPublish(k, rec, will.TopicName) {
			w.publish(k, rec.ProtocolVersion, will)
			w.metrics.wills.WithLabelValues("dead_instance").Inc()
			log.Info("published the Will of a client whose instance is gone", "topic", will.TopicName,
				"silent_for", time.Since(since).Round(time.Millisecond))
		} else {
			w.metrics.willsDenied.Inc()
			log.Warn("Will of a client whose instance is gone not published: its user may not publish to its topic",
				"topic", will.TopicName, "username", string(rec.Username))
		}
	}
	if rec.Clean || rec.Expiry == 0 {
		if w.isCancelled(p) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		defer cancel()
		if err := w.table.Delete(ctx, k); err != nil {
			log.Warn("session of a dead instance not deleted", "err", err)
		}
	}
}

// mayPublish reports whether the user of client k's session record rec
// may publish to topic under this instance's ACL: the check mochi makes of
// a PUBLISH, on a stand-in for the client that is gone.
func (w *willKeeper) mayPublish(k string, rec *state.Session, topic string) bool {
	if w.mayWrite == nil {
		return true
	}
	cl := &mqtt.Client{ID: k}
	cl.Properties.Username, cl.Properties.ProtocolVersion = rec.Username, rec.ProtocolVersion
	return w.mayWrite(cl, topic)
}

// fence writes the record that ends the dead owner's connection and waits
// to read it back before anything else of the session; it returns the
// record it fenced, or nil: someone else acts, the record changed, or Kafka
// failed (the next scan tries again, unless the fence was written).
func (w *willKeeper) fence(k string, p *pendingWill, log *slog.Logger) *state.Session {
	ctx, cancel := context.WithTimeout(context.Background(), 3*w.timeout)
	defer cancel()
	if err := w.table.Sync(ctx); err != nil {
		log.Debug("dead owner's session: table not read to its end", "err", err)
		return nil
	}
	cur := w.lookup(ctx, k)
	if cur == nil || !cur.Connected || cur.Owner != p.owner || cur.Epoch != p.epoch {
		return nil
	}
	f := *cur
	f.Connected, f.Disconnected, f.Epoch, f.WillBy = false, time.Now().UnixMilli(), cur.Epoch+1, w.id
	v, err := f.Encode()
	if err != nil {
		return nil
	}
	if err := w.table.Put(ctx, k, v); err != nil {
		log.Warn("dead owner's session: fence not written (retried)", "err", err)
		return nil
	}
	select {
	case <-p.mine:
		// Closed only while not cancelled; a cancel after it is seen by
		// the caller.
	case <-p.cancel:
		log.Debug("dead owner's session: another record came first (client back, or another instance acts)")
		return nil
	case <-ctx.Done():
		log.Warn("dead owner's session: own fence not read back (retried)")
		return nil
	case <-w.stop:
		return nil
	}
	w.mu.Lock()
	w.handled[k] = f.Epoch
	w.mu.Unlock()
	log.Debug("dead owner's session fenced", "fence_epoch", f.Epoch)
	return cur
}

// refence writes the fence of epoch (this instance's, of k) again over a
// record of the fenced owner that landed after it (w.mu held): a write that
// was on its way when the fence landed (a checkpoint, of an owner cut off
// from Kafka's heartbeats but still running). It says connected, with an
// epoch below the fence's: the owner, which read the fence, takes it for
// its own late write that a new owner repairs (lostSessions), but a fence
// has no owner to repair it, so the session would stay connected for good
// (a connected record never expires) and its Will was published already.
// The rewrite keeps the late record's content (its positions are the
// newest) and is the fence again: disconnected, epoch, WillBy this
// instance; the Will is not published again.
func (w *willKeeper) refence(k string, epoch int64) {
	select {
	case <-w.stop:
		return // stopping: wait() may be under way
	default:
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 3*w.timeout)
		defer cancel()
		if err := w.table.Sync(ctx); err != nil {
			w.log.Warn("fenced owner's late write: table not read to its end", "client", k, "err", err)
			return
		}
		cur := w.lookup(ctx, k)
		if cur == nil || !cur.Connected || cur.Epoch >= epoch {
			return // repaired already, or the session moved on
		}
		f := *cur
		f.Connected, f.Disconnected, f.Epoch, f.WillBy = false, time.Now().UnixMilli(), epoch, w.id
		v, err := f.Encode()
		if err == nil {
			err = w.table.Put(ctx, k, v)
		}
		if err != nil {
			w.log.Warn("fenced owner's late write not overwritten", "client", k, "err", err)
			return
		}
		if w.metrics != nil {
			w.metrics.repaired.Inc()
		}
		w.log.Info("fenced again a session whose dead owner's late write said connected", "client", k, "owner", cur.Owner, "epoch", cur.Epoch)
	}()
}

func (w *willKeeper) isCancelled(p *pendingWill) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return p.cancelled
}
