package bridge

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// reverseMarkInterval is how often the committer makes the session store
// durable and marks what it covers for commit (kgo then commits marks every
// reverseCommitInterval). It is the group commit: one fsync per interval
// whatever the record rate.
const reverseMarkInterval = 200 * time.Millisecond

// reverseStartMargin is subtracted from the stored last-consumed time when a
// restart looks for the first record of a partition that has no commit (one
// created while the bridge was down, or before a regex refresh found it).
const reverseStartMargin = 10 * time.Minute

// committer decides which consumed offsets may be committed.
//
// The reverse goroutine reports each partition's last handled record
// (published into mochi, or skipped). With a session store, every QoS 1/2
// delivery of that record is then in flight to a subscriber and written to
// the store (or already acknowledged); the committer fsyncs the store (sync)
// and only then marks the offsets, so a committed offset implies that every
// delivery it produced is acknowledged or on disk. Without a store the marks
// are set at once (deliveries are in memory only; see reverse.commit for the
// bounded drain at shutdown).
type committer struct {
	client *kgo.Client
	store  *store // nil: no session store
	log    *slog.Logger

	mu      sync.Mutex
	pending map[string]map[int32]kgo.EpochOffset

	flushMu sync.Mutex // one flush at a time (ticker, revoke, shutdown)
}

func newCommitter(client *kgo.Client, st *store, log *slog.Logger) *committer {
	return &committer{client: client, store: st, log: log, pending: make(map[string]map[int32]kgo.EpochOffset)}
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
	if c.store == nil {
		c.flush()
	}
}

// flush makes the store durable and marks everything handled before it.
func (c *committer) flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return nil
	}
	marks := c.pending
	c.pending = make(map[string]map[int32]kgo.EpochOffset, len(marks))
	c.mu.Unlock()
	if c.store != nil {
		now := time.Now()
		if err := c.store.sync(); err != nil {
			// Not durable: do not mark. The records are redelivered after a
			// restart (at least once), never skipped.
			c.log.Error("session store sync failed: offsets not committed", "err", err)
			return err
		}
		c.store.touchAlive(now)
	}
	c.client.MarkCommitOffsets(marks)
	return nil
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

// reverseStartTime is where partitions without a committed offset start
// (reverse.start_offset latest): records newer than it are delivered. It is
// now, or, with a store that has consumed before, the last time the store
// was synced minus reverseStartMargin, so that partitions created while the
// bridge was down are read from their first record.
func reverseStartTime(st *store, now time.Time) time.Time {
	if st == nil {
		return now
	}
	if alive := st.alive(); !alive.IsZero() && alive.Before(now) {
		return alive.Add(-reverseStartMargin)
	}
	st.touchAlive(now)
	return now
}
