package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// topicLister shares the cluster's topic listing among the replays of an
// instance. Each pass of each replay listed every topic (thousands on a dev
// cluster): with a reconnect storm this was much of a replay's time. A
// listing is shared while it is young enough for the caller:
//
//   - the first pass takes one up to topicsMaxAge old. A topic created
//     since is missed there, and found by the last pass;
//   - the last pass takes only a listing requested after its session's
//     subscriptions went live (as the uncached listing was), and starts a
//     partition the first pass did not read from the session's position, or
//     its subscription's time (replay.go pass): nothing the first pass
//     missed is skipped.
//
// One listing is requested at a time; replays needing a newer one wait for
// it.
type topicLister struct {
	list   func(ctx context.Context) ([]string, error)
	maxAge time.Duration

	mu    sync.Mutex
	at    time.Time // when the cached listing was requested
	names []string  // shared: read only
}

// topicsMaxAge is how old a listing the first pass of a replay may use.
const topicsMaxAge = 2 * time.Second

func newTopicLister(admin *kadm.Client) *topicLister {
	return &topicLister{maxAge: topicsMaxAge, list: func(ctx context.Context) ([]string, error) {
		md, err := admin.ListTopics(ctx)
		if err != nil {
			return nil, err
		}
		return md.Names(), nil
	}}
}

// recent returns a listing at most maxAge old.
func (l *topicLister) recent(ctx context.Context) ([]string, error) {
	return l.since(ctx, time.Now().Add(-l.maxAge))
}

// since returns a listing requested at or after t.
func (l *topicLister) since(ctx context.Context, t time.Time) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names != nil && !l.at.Before(t) {
		return l.names, nil
	}
	at := time.Now()
	names, err := l.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	if names == nil {
		names = []string{}
	}
	l.at, l.names = at, names
	return names, nil
}
