package session

import (
	"context"
	"fmt"

	"github.com/ferry-bridge/ferry/state"
)

// What the operator's admin API (package admin, through the bridge) reads
// of the state and does to it. Every instance reads the whole sessions and
// retained tables, so each answers for the cluster.

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
