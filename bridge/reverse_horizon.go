package bridge

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferry-bridge/ferry/topicmap"
)

// horizonEvery is how often the reverse path's horizon is checked
// (reverseProgress.check).
const horizonEvery = 5 * time.Second

// horizonWatch moves the reverse path's horizon: every horizonEvery it
// lists the consumed topics (a listing requested after the check began, so
// a topic created before it is in it) and their partitions' end offsets.
// While a partition has handed out nothing in this run, the reverse group's
// committed offsets say where its consumer started; only for a group of
// this instance's own (an empty reverse.group_id): a shared group's
// offsets are other instances' hand-outs.
type horizonWatch struct {
	progress *reverseProgress
	admin    *kadm.Client
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
		if !topicmap.IsFerryTopic(n) && !topicmap.IsInternalKafkaTopic(n) && w.progress.consumes(n) {
			consumed = append(consumed, n)
		}
	}
	ends := map[tp]int64{}
	if len(consumed) > 0 {
		listed, err := w.admin.ListEndOffsets(ctx, consumed...)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return err
		}
		listed.Each(func(o kadm.ListedOffset) { ends[tp{o.Topic, o.Partition}] = o.Offset })
	}
	var committed map[tp]int64
	if w.group != "" && w.progress.anyUnknown(ends) {
		offs, err := w.admin.FetchOffsets(ctx, w.group)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			return err
		}
		committed = map[tp]int64{}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				committed[tp{o.Topic, o.Partition}] = o.At
			}
		})
	}
	w.progress.check(ends, committed, at)
	return nil
}
