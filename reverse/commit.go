package reverse

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// reverseMarkInterval is how often the committer marks what is safe for
// commit (kgo then commits marks every reverseCommitInterval).
const reverseMarkInterval = 200 * time.Millisecond

// committer decides which consumed offsets may be committed.
//
// The reverse goroutine reports each partition's last handled record
// (published into mochi, or skipped). A record's offset is marked only when
// every QoS 1/2 delivery it produced to a clean session is acknowledged:
// a clean session has nothing else to redeliver from. Deliveries to
// persistent sessions need no wait: a persistent session's position
// (session/positions.go) is its own record of what it still needs, independent of
// the group's offsets. Each flush closes a round: the offsets handled so far
// and the sequence number of the latest delivery (InflightOrder.last); a
// round is marked once no delivery up to its sequence is still in flight to
// a clean session. kgo commits marks in the background every
// reverseCommitInterval. A crash therefore redelivers, never skips.
type committer struct {
	client *kgo.Client
	order  *InflightOrder
	log    *slog.Logger

	mu      sync.Mutex
	pending map[string]map[int32]kgo.EpochOffset

	flushMu sync.Mutex // one flush at a time (ticker, revoke, shutdown); guards rounds
	rounds  []commitRound
	flushes atomic.Int64 // completed flush calls (tests)
}

// commitRound is what may be marked once every delivery up to upTo is safe.
type commitRound struct {
	upTo  uint64
	marks map[string]map[int32]kgo.EpochOffset
}

func newCommitter(client *kgo.Client, order *InflightOrder, log *slog.Logger) *committer {
	return &committer{client: client, order: order, log: log, pending: make(map[string]map[int32]kgo.EpochOffset)}
}

// handled records that rec and everything before it in its partition are
// handled.
func (c *committer) handled(rec *kgo.Record) {
	c.mu.Lock()
	ps := c.pending[rec.Topic]
	if ps == nil {
		ps = make(map[int32]kgo.EpochOffset)
		c.pending[rec.Topic] = ps
	}
	ps[rec.Partition] = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	c.mu.Unlock()
}

// flush closes a round and marks every round that is safe now.
func (c *committer) flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	defer c.flushes.Add(1)
	c.mu.Lock()
	if len(c.pending) > 0 {
		c.rounds = append(c.rounds, commitRound{upTo: c.order.last(), marks: c.pending})
		c.pending = make(map[string]map[int32]kgo.EpochOffset)
	}
	c.mu.Unlock()
	if len(c.rounds) == 0 {
		return nil
	}
	oldest := c.order.oldestVolatile()
	n := 0
	for n < len(c.rounds) && c.rounds[n].upTo < oldest {
		n++
	}
	if n == 0 {
		return nil // a clean session has not acknowledged yet
	}
	marks := make(map[string]map[int32]kgo.EpochOffset)
	for _, r := range c.rounds[:n] { // later rounds hold later offsets
		for topic, ps := range r.marks {
			if marks[topic] == nil {
				marks[topic] = make(map[int32]kgo.EpochOffset)
			}
			for p, o := range ps {
				marks[topic][p] = o
			}
		}
	}
	c.rounds = slices.Delete(c.rounds, 0, n)
	c.client.MarkCommitOffsets(marks)
	return nil
}

// forget drops what is waiting to be marked for topics (deleted, or
// deleted and re-created: their old offsets must never be committed).
func (c *committer) forget(topics []string) {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	for _, t := range topics {
		delete(c.pending, t)
		for _, r := range c.rounds {
			delete(r.marks, t)
		}
	}
	c.mu.Unlock()
}

// unsafe reports whether rounds are waiting for acknowledgements.
func (c *committer) unsafe() bool {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	return len(c.rounds) > 0
}

// run flushes every reverseMarkInterval until ctx ends.
func (c *committer) run(ctx context.Context) {
	t := time.NewTicker(reverseMarkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.flush()
		}
	}
}
