package session

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-bridge/ferry/state"
)

// stateMetrics are the series of the Kafka-backed broker state (sessions
// and retained messages).
type stateMetrics struct {
	writes         *prometheus.CounterVec
	writeSeconds   prometheus.Histogram
	connectWrite   prometheus.Histogram
	subscribeWrite prometheus.Histogram
	resumed        prometheus.Counter
	subsDenied     prometheus.Counter // resumed subscriptions the connecting user's ACL denies (screenSubs)
	takenOver      prometheus.Counter
	repaired       prometheus.Counter
	refused        prometheus.Counter
	denied         *prometheus.CounterVec // CONNECTs refused by admission, by reason (owner, quota)
	retainedWrites *prometheus.CounterVec
	replayed       *prometheus.CounterVec
	replayedNew    prometheus.Counter // replayed{kind="new"}, resolved once: a storm counts 200,000
	replayedDup    prometheus.Counter // replayed{kind="duplicate"}
	replayFirst    prometheus.Histogram
	replayDuration prometheus.Histogram
	replayRead     prometheus.Counter
	liveCopies     prometheus.Counter
	wills          *prometheus.CounterVec
	willsDenied    prometheus.Counter // dead instances' clients' Wills their user's ACL denies
	// inflightDropped counts deliveries mochi dropped from flight (their
	// expiry passed): kept owed, not acknowledged (OnQosDropped).
	inflightDropped prometheus.Counter
}

func newStateMetrics(reg prometheus.Registerer) (*stateMetrics, error) {
	latency := prometheus.ExponentialBuckets(0.0001, 2, 18)
	m := &stateMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_state_session_writes_total",
			Help: "Session records written to the sessions topic, by result (ok, error)."}, []string{"result"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_state_write_seconds",
			Help: "One session record write, until Kafka acknowledged it (acks=all).", Buckets: latency}),
		connectWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_state_connect_seconds",
			Help: "CONNECT: reading the sessions topic to its end (persistent resume) and writing the claim.", Buckets: latency}),
		subscribeWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_state_subscribe_seconds",
			Help: "SUBSCRIBE of a persistent session: the subscription set written before SUBACK.", Buckets: latency}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_resumed_total",
			Help: "Persistent sessions resumed from the sessions topic (Session Present 1)."}),
		subsDenied: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_resumed_subscriptions_denied_total",
			Help: "Subscriptions dropped from resumed sessions because the connecting user's ACL does not allow them (a session resumed by another user)."}),
		takenOver: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_taken_over_total",
			Help: "Sessions this instance gave up because a newer connection claimed them on another instance."}),
		repaired: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_repaired_total",
			Help: "Session records rewritten because a former owner's write landed after this instance's claim."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_refused_total",
			Help: "CONNECTs refused (Server unavailable) because the session could not be read or claimed in Kafka."}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_sessions_denied_total",
			Help: "CONNECTs refused by session policy, by reason (owner: the client id's session belongs to another user, mqtt.session_owner; quota: a new persistent session past mqtt.max_sessions or mqtt.max_sessions_per_user)."}, []string{"reason"}),
		retainedWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_state_retained_writes_total",
			Help: "Retained-message changes written to the retained topic, by result (ok, error)."}, []string{"result"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_sessions_replayed_total",
			Help: "Messages delivered from Kafka to resumed sessions, by kind (duplicate: the session's last written record shows it was delivered before, acknowledged or not, and it is sent with DUP; new: anything else, including what was delivered after that write)."}, []string{"kind"}),
		replayFirst: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_sessions_replay_first_seconds",
			Help: "From a resumed session's CONNACK to its first replayed message.", Buckets: latency}),
		replayDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_sessions_replay_seconds",
			Help: "From a resumed session's CONNACK until its replay caught up and its subscriptions went live.", Buckets: latency}),
		replayRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_replay_read_total",
			Help: "Kafka records session replays read, matching or not (the reverse topics may carry any MQTT topic, so a replay reads them all from the session's positions or horizon)."}),
		liveCopies: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_live_copies_discarded_total",
			Help: "Live deliveries to resumed sessions not written because the session's replay had delivered the same Kafka record (the reverse path handing out below the replay's end: lagging, or a topic it found after the resume)."}),
		wills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_wills_published_total",
			Help: "Wills this instance published on behalf of another, by reason (dead_instance: the client's instance stopped heartbeating)."}, []string{"reason"}),
		inflightDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_sessions_inflight_dropped_total",
			Help: "Deliveries to persistent sessions the broker dropped from flight unacknowledged (the message's expiry passed): the session's position stays at them, its next resume reads them again."}),
	}
	m.wills.WithLabelValues("dead_instance")
	m.willsDenied = prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_wills_denied_total",
		Help: "Wills of dead instances' clients not published: their user's publish ACL (this instance's) denies the Will's topic."})
	for _, r := range []string{"owner", "quota"} {
		m.denied.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.writes.WithLabelValues(r)
		m.retainedWrites.WithLabelValues(r)
	}
	m.replayedNew, m.replayedDup = m.replayed.WithLabelValues("new"), m.replayed.WithLabelValues("duplicate")
	for _, c := range []prometheus.Collector{m.writes, m.writeSeconds, m.connectWrite, m.subscribeWrite, m.resumed,
		m.subsDenied, m.takenOver, m.repaired, m.refused, m.retainedWrites, m.replayed, m.replayFirst, m.replayDuration, m.replayRead, m.liveCopies, m.wills,
		m.denied, m.willsDenied, m.inflightDropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("state metrics: %w", err)
		}
	}
	return m, nil
}

// Kinds of session records the sessions table counts (sessionTag), for the
// ferry_sessions gauges: a scrape reads two counters, not the table.
const (
	tagOther   uint8 = iota // a clean session's claim, or unreadable
	tagOnline               // persistent, its client connected
	tagOffline              // persistent, its client gone
)

// sessionTag is the sessions table's state.TableConfig.Tag.
func sessionTag(v []byte) uint8 {
	var s struct {
		Connected bool `json:"connected"`
		Clean     bool `json:"clean"`
	}
	if head, ok := recordHead(v); ok {
		// Every record read, on every instance: no JSON decoding.
		s.Connected, s.Clean = bytes.Contains(head, []byte(`"connected":true`)), bytes.Contains(head, []byte(`"clean":true`))
	} else if json.Unmarshal(v, &s) != nil {
		return tagOther
	}
	switch {
	case s.Clean:
		return tagOther
	case s.Connected:
		return tagOnline
	default:
		return tagOffline
	}
}

// recordHead is the part of an encoded session record before its first
// field that is not a scalar (state.Session's order: client, owner,
// epoch, connected, disconnected, clean, expiry come first; strings are
// escaped, so a search for `"clean":true` there finds only the field).
// false: not a record state.Session.Encode wrote.
func recordHead(v []byte) ([]byte, bool) {
	i := bytes.Index(v, []byte(`,"protocol":`))
	if i < 0 || !bytes.HasPrefix(v, []byte(`{"v":`)) {
		return nil, false
	}
	return v[:i], true
}

// registerSessionGauges exports how many sessions the table holds, online
// and offline (every instance sees all of them).
func registerSessionGauges(reg prometheus.Registerer, t *state.Table) error {
	count := func(tag uint8) func() float64 {
		return func() float64 { return float64(t.Count(tag)) }
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ferry_sessions", ConstLabels: prometheus.Labels{"state": "online"},
			Help: "Persistent MQTT sessions in the sessions topic, by state (online, offline), across all instances."}, count(tagOnline)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ferry_sessions", ConstLabels: prometheus.Labels{"state": "offline"},
			Help: "Persistent MQTT sessions in the sessions topic, by state (online, offline), across all instances."}, count(tagOffline)),
	} {
		if err := reg.Register(g); err != nil {
			return fmt.Errorf("state metrics: %w", err)
		}
	}
	return nil
}
