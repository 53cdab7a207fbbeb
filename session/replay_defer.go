package session

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// deferrals keep the replay's last pass behind the live deliveries it
// meets. That pass runs while the session's subscriptions are live and
// their deliveries held (replay_hold.go). A held delivery is pending, so
// the pass skips its record (the live copy comes); but writing the
// partition's later records then put them on the wire before it (the
// sessions soak at 1,000 sessions: a later record, delivered live too but
// not yet recorded, written by the pass ahead of the held one). So once
// the pass meets, in a partition, a live delivery not yet written, it
// keeps the rest of that partition's records; after the hold is released
// and that delivery is written, it delivers them the same way (each may
// stop at another unwritten live delivery). A partition's position moves
// past its end only once all of them are delivered: a replay cut short
// leaves them to the next resume.
//
// The live delivery waited for may be dropped instead of written: mochi
// drops a delivery whose client's outbound queue is full, right after
// putting it in flight (OnQosPublish, then OnPublishDropped). A pass that
// met its record between the two skipped it as pending; the drain then
// delivers it first (its record is kept as the partition's head), else the
// pass ended past a message the client never got.
type deferrals struct {
	blocked map[tp]uint16      // partition -> packet id of the live delivery it waits for
	heads   map[tp]*kgo.Record // partition -> the record of that live delivery
	kept    map[tp][]*kgo.Record
}

// newDeferrals returns the last pass's empty deferrals.
func newDeferrals() *deferrals {
	return &deferrals{blocked: map[tp]uint16{}, heads: map[tp]*kgo.Record{}, kept: map[tp][]*kgo.Record{}}
}

// maxWaitWritten bounds the wait for one live delivery to be written; past
// it (mochi failed that write: too large for the client) the kept records
// go anyway: out of order rather than lost.
const maxWaitWritten = 10 * time.Second

// waits reports whether partition k's records are kept.
func (d *deferrals) waits(k tp) bool {
	if d == nil {
		return false
	}
	_, ok := d.blocked[k]
	return ok
}

// keep adds rec to its partition's kept records.
func (d *deferrals) keep(rec *kgo.Record) {
	k := tp{rec.Topic, rec.Partition}
	d.kept[k] = append(d.kept[k], rec)
}

// block makes the partition of rec wait for the live delivery of rec under
// pid.
func (d *deferrals) block(rec *kgo.Record, pid uint16) {
	k := tp{rec.Topic, rec.Partition}
	d.blocked[k] = pid
	d.heads[k] = rec
}

// drain delivers the kept records, each partition after the live delivery
// it waits for is written, and then moves its position to its end. The
// hold must be released.
func (rs *replayRun) drain(ctx context.Context, ends map[tp]int64) error {
	d := rs.later
	for len(d.blocked) > 0 {
		keys := make([]tp, 0, len(d.blocked))
		for k := range d.blocked {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return keys[i].less(keys[j])
		})
		for _, k := range keys {
			if err := rs.waitWritten(ctx, d.blocked[k]); err != nil {
				return err
			}
			delete(d.blocked, k)
			head := d.heads[k]
			delete(d.heads, k)
			if rs.o.pos.takeDropped(Coord{head.Topic, head.Partition, head.Offset}) {
				if err := rs.deliverKept(ctx, head); err != nil {
					return err
				}
			}
			recs := d.kept[k]
			for len(recs) > 0 && !d.waits(k) {
				rec := recs[0]
				recs = recs[1:]
				if err := rs.deliverKept(ctx, rec); err != nil {
					return err
				}
				if !d.waits(k) {
					rs.o.pos.reading(k, rec.Offset+1)
				}
			}
			d.kept[k] = recs
			if !d.waits(k) {
				delete(d.kept, k)
				rs.o.pos.replayed(k, ends[k])
			}
		}
	}
	return nil
}

// deliverKept delivers a kept record (deliverRecord); when the replay
// yields its slot meanwhile (its client's window stayed full), it tries
// again once it has one: the record is in memory, no Kafka client to close.
func (rs *replayRun) deliverKept(ctx context.Context, rec *kgo.Record) error {
	for {
		err := rs.deliverRecord(ctx, rec)
		if !errors.Is(err, errYieldSlot) {
			return err
		}
		if err := rs.yield(ctx); err != nil {
			return err
		}
	}
}

// waitWritten waits until the live delivery under pid is written (or no
// longer in flight: dropped, acknowledged).
func (rs *replayRun) waitWritten(ctx context.Context, pid uint16) error {
	deadline := time.Now().Add(maxWaitWritten)
	for rs.o.live.isUnwritten(pid) {
		if _, ok := rs.cl.State.Inflight.Get(pid); !ok {
			return nil
		}
		if time.Now().After(deadline) {
			rs.r.log.Warn("replay: a live delivery was not written in time; the replay goes on",
				"client", rs.cl.ID, "packet_id", pid)
			return nil
		}
		if err := rs.pause(ctx); err != nil {
			return err
		}
	}
	return nil
}
