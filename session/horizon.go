package session

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferry-bridge/ferry/topicmap"
)

// horizonEvery is how often the reverse path's horizon is checked
// (ReverseProgress.check).
const horizonEvery = 5 * time.Second

// horizonWatch moves the reverse path's horizon: every horizonEvery it
// lists the consumed topics (a listing requested after the check began, so
// a topic created before it is in it) and their partitions' end offsets.
// While a partition has handed out nothing in this run, the reverse group's
// committed offsets say where its consumer started (only for a group of
// this instance's own, an empty reverse.group_id: a shared group's offsets
// are other instances' hand-outs), and a partition retention emptied has
// nothing to hand out.
type horizonWatch struct {
	progress *ReverseProgress
	admin    *kadm.Client
	listEnds func(ctx context.Context, topics ...string) (kadm.ListedOffsets, error) // reads.listEnds
	topics   *topicLister
	group    string // "" when the reverse group is shared
	log      *slog.Logger
}

func (w *horizonWatch) run(stop <-chan struct{}) {
	t := time.NewTicker(horizonEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), horizonEvery)
		if err := w.check(ctx); err != nil {
			w.log.Debug("reverse horizon not checked", "err", err)
		}
		cancel()
	}
}

func (w *horizonWatch) check(ctx context.Context) error {
	at := time.Now()
	names, err := w.topics.since(ctx, at)
	if err != nil {
		return err
	}
	var consumed []string
	for _, n := range names {
		if !topicmap.IsFerryTopic(n) && !topicmap.IsInternalKafkaTopic(n) && w.progress.static(n) {
			consumed = append(consumed, n)
		}
	}
	ends := map[tp]int64{}
	if len(consumed) > 0 {
		listed, err := w.listEnds(ctx, consumed...)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return err
		}
		listed.Each(func(o kadm.ListedOffset) { ends[tp{o.Topic, o.Partition}] = o.Offset })
	}
	var seen map[tp]int64
	if w.progress.anyUnknown(ends) {
		if seen, err = w.startedAt(ctx, consumed); err != nil {
			return err
		}
	}
	w.progress.check(ends, seen, at)
	return nil
}

// startedAt says, for the partitions nothing was handed out of yet in this
// run, an offset below which nothing is left to hand out: the reverse
// group's committed offset (a group of this instance's own only), or the
// end when retention emptied the partition (its start is its end).
func (w *horizonWatch) startedAt(ctx context.Context, topics []string) (map[tp]int64, error) {
	seen := map[tp]int64{}
	starts, err := w.admin.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, err
	}
	starts.Each(func(o kadm.ListedOffset) { seen[tp{o.Topic, o.Partition}] = o.Offset })
	if w.group == "" {
		return seen, nil // the start offset is a floor only where it is the end
	}
	offs, err := w.admin.FetchOffsets(ctx, w.group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, err
	}
	offs.Each(func(o kadm.OffsetResponse) {
		k := tp{o.Topic, o.Partition}
		if o.At >= 0 && o.At > seen[k] {
			seen[k] = o.At
		}
	})
	return seen, nil
}
