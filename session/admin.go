package session

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ferry-bridge/ferry/state"
)

// What the operator's admin API (package admin, through the bridge) reads
// of the state and does to it. Every instance reads the whole sessions and
// retained tables, so each answers for the cluster.

// SessionSummary is one session of a listing: what every instance knows
// of every session without reading its record.
type SessionSummary struct {
	Client    string
	Connected bool
	// Owner is the instance that serves (or last served) it, ExpiresAt
	// (unix ms) when a disconnected one ends; "" and 0 when not known.
	Owner     string
	ExpiresAt int64
}

// SessionPage lists the persistent sessions (clean sessions' claims left
// out) whose client id starts with prefix, after the id after, in id
// order: at most limit, and whether more follow. connected, when not nil,
// keeps only the connected (true) or disconnected (false) ones. No record
// is read or decoded (state.Table.Page).
func (e *Engine) SessionPage(prefix, after string, limit int, connected *bool) ([]SessionSummary, bool) {
	keep := func(tag uint8) bool { return tag == tagOnline || tag == tagOffline }
	if connected != nil {
		want := uint8(tagOffline)
		if *connected {
			want = tagOnline
		}
		keep = func(tag uint8) bool { return tag == want }
	}
	ids, more := e.sessions.Page(prefix, after, limit, keep)
	out := make([]SessionSummary, len(ids))
	w := e.wills
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, id := range ids {
		s := SessionSummary{Client: id}
		if c, ok := w.conn[id]; ok {
			s.Connected, s.Owner = true, c.owner
		} else if o, ok := w.offline[id]; ok {
			s.Owner, s.ExpiresAt = o.owner, o.expires
		}
		out[i] = s
	}
	return out, more
}

// Session reads client's session record after reading the sessions table
// to its end (read-your-writes: the latest write of any instance); nil,
// nil when there is none.
func (e *Engine) Session(ctx context.Context, client string) (*state.Session, error) {
	if err := e.sessions.Sync(ctx); err != nil {
		return nil, fmt.Errorf("%w: sessions table: %v", ErrKafkaUnavailable, err)
	}
	v, ok, err := e.sessions.Read(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKafkaUnavailable, err)
	}
	if !ok {
		return nil, nil
	}
	return state.DecodeSession(v)
}

// SessionExpiresAt is when (unix ms) rec ends under this server's
// maximum session expiry (0: connected).
func (e *Engine) SessionExpiresAt(rec *state.Session) int64 {
	return rec.ExpiresAt(e.wills.maxExpiry)
}

// EndOffsets lists the end offset of every partition of topics (a
// session's lag: the end minus its position).
func (e *Engine) EndOffsets(ctx context.Context, topics []string) (map[string]map[int32]int64, error) {
	ends, err := e.hook.replays.reads.endOffsets(ctx, topics, false)
	if err != nil {
		return nil, fmt.Errorf("%w: end offsets: %v", ErrKafkaUnavailable, err)
	}
	out := make(map[string]map[int32]int64)
	for k, off := range ends {
		if out[k.topic] == nil {
			out[k.topic] = make(map[int32]int64)
		}
		out[k.topic][k.part] = off
	}
	return out, nil
}

// EndSession deletes an offline session's record (a tombstone): every
// instance forgets it; a session connected somewhere is its owner's to
// end (its record's owner repairs a tombstone it reads).
func (e *Engine) EndSession(ctx context.Context, client string) error {
	if err := e.sessions.Delete(ctx, client); err != nil {
		return fmt.Errorf("%w: %v", ErrKafkaUnavailable, err)
	}
	return nil
}

// RetainedSummary is one retained message of a listing: never its payload.
type RetainedSummary struct {
	Topic   string
	Size    int // payload bytes
	QoS     byte
	Created time.Time
}

// RetainedPage lists the retained messages whose topic starts with prefix,
// after the topic after, in topic order: at most limit, and whether more
// follow. Only the page's records are decoded.
func (e *Engine) RetainedPage(prefix, after string, limit int) ([]RetainedSummary, bool) {
	t := e.retained.table
	topics, more := t.Page(prefix, after, limit, nil)
	out := make([]RetainedSummary, 0, len(topics))
	for _, topic := range topics {
		v, ok := t.Get(topic)
		if !ok {
			continue
		}
		var rv RetainedValue
		if json.Unmarshal(v, &rv) != nil {
			continue
		}
		out = append(out, RetainedSummary{Topic: topic, Size: len(rv.Msg.Payload), QoS: rv.Msg.FixedHeader.Qos,
			Created: time.Unix(rv.Msg.Created, 0)})
	}
	return out, more
}

// ClearRetained deletes topic's retained message cluster-wide (a
// tombstone, which every instance applies to its broker, as an empty
// retained PUBLISH does); false when there was none.
func (e *Engine) ClearRetained(ctx context.Context, topic string) (bool, error) {
	t := e.retained.table
	if err := t.Sync(ctx); err != nil {
		return false, fmt.Errorf("%w: retained table: %v", ErrKafkaUnavailable, err)
	}
	if _, ok := t.Get(topic); !ok {
		return false, nil
	}
	if err := t.Delete(ctx, topic); err != nil {
		return false, fmt.Errorf("%w: %v", ErrKafkaUnavailable, err)
	}
	// This broker stops serving it now, as for an empty retained PUBLISH
	// here; the others when they read the tombstone.
	e.retained.apply(topic, nil)
	return true, nil
}
