package reverse

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// StartOffsets places partitions that have no committed offset
// (reverse.start_offset latest) at the first record newer than startAt,
// without the race of kgo's own AfterMilli reset. kgo lists by time, then
// the end offset, and takes the end when the partition had no such record
// at the first listing: a record appended between the two listings is
// skipped (a new group's first join, a new topic found while still empty).
// Here the end offset E is listed first and the by-time offset T after it;
// the start is min(T, E): every record at E or later was appended after
// startAt, and any record newer than startAt before E is found by T.
//
// It runs as kgo's AdjustFetchOffsetsFn, after kgo has fetched the group's
// commits; partitions with a commit keep it. kgo's Offset does not say
// which partitions got a commit and which the reset, so the commits are
// fetched once more (once per rebalance). On any error kgo's own reset
// applies (and the race with it), which is logged.
func StartOffsets(group string, startAt time.Time, client func() *kgo.Client, log *slog.Logger) func(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	return func(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		adm := kadm.NewClient(client())
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			log.Warn("listing the group's commits for the start offsets failed: kgo's reset applies", "err", err)
			return offs, nil
		}
		need := map[string][]int32{}
		for t, ps := range offs {
			for p := range ps {
				if o, ok := committed.Lookup(t, p); !ok || o.At < 0 {
					need[t] = append(need[t], p)
				}
			}
		}
		if len(need) == 0 {
			return offs, nil
		}
		topics := make([]string, 0, len(need))
		for t := range need {
			topics = append(topics, t)
		}
		starts, err := firstAfter(ctx, adm, startAt, topics)
		if err != nil {
			log.Warn("listing start offsets failed: kgo's reset applies", "topics", topics, "err", err)
			return offs, nil
		}
		for t, ps := range need {
			for _, p := range ps {
				if at, ok := starts[t][p]; ok {
					offs[t][p] = kgo.NewOffset().At(at)
				}
			}
		}
		return offs, nil
	}
}

// firstAfter lists, for every partition of topics, the offset of its first
// record newer than t: the end offset E first, then the offset by time T,
// and the start is min(T, E) (see startOffsets: a record appended between
// the two listings is not skipped). Partitions whose listing failed are
// left out.
func firstAfter(ctx context.Context, adm *kadm.Client, t time.Time, topics []string) (map[string]map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...) // first: see above
	if err != nil {
		return nil, err
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topics...)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil || e.Offset < 0 {
			return
		}
		at := e.Offset
		if a, ok := after.Lookup(e.Topic, e.Partition); ok && a.Err == nil && a.Offset >= 0 && a.Offset < at {
			at = a.Offset
		}
		if out[e.Topic] == nil {
			out[e.Topic] = map[int32]int64{}
		}
		out[e.Topic][e.Partition] = at
	})
	return out, nil
}
