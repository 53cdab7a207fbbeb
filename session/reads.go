package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reads is the replays' one way into Kafka: every replay of an instance
// lists offsets and fetches records through it, and what replays ask at
// the same time is asked of Kafka once. A reconnect storm's replays each
// created a Kafka client and listed and fetched on their own: thousands
// of connections, metadata and offset requests, and the same records of a
// partition fetched once per session (20 sessions of a group read one
// partition from nearly the same offset).
//
//   - endOffsets: the end offsets of some topics, from a listing that
//     started after the call (the last pass must see what was appended
//     before its subscriptions went live); calls that arrive while one is
//     on its way share the next.
//   - offsetsAfter: the first offset at or after a time, per partition;
//     the queries that wait are sent in one request (each partition once
//     per request: another time for it waits for the next), and an answer
//     that names an offset serves the same question for a while
//     (timesKeep): Kafka finds it by reading the partition's batches, a
//     compressed batch decompressed, and the sessions of a storm ask the
//     same few times of a partition in many rounds.
//   - fetch: records of some partitions from an offset each. Waiting
//     fetches go out together, one request per leader, each partition
//     from the lowest offset asked of it; every fetch whose offset the
//     answer covers gets the records from its offset on (shared, read
//     only), the others wait for the next round.
//
// One client, no consumer: Fetch requests carry no fetch session, and a
// partition's leader comes from a metadata request (renewed when Kafka
// says it moved).
type reads struct {
	cl  *kgo.Client
	adm *kadm.Client
	// listEnds lists end offsets (adm.ListCommittedOffsets, the last
	// stable offsets, when committed; else adm.ListEndOffsets; a test's
	// own).
	listEnds func(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	// committed: fetches read committed records only (isolation level
	// read_committed): an aborted transaction's records are left out, an
	// open one's wait for its end.
	committed bool

	mu       sync.Mutex
	nextEnds *endsRound // the listing the next endOffsets call joins
	curEnds  *endsRound // the listing on its way (endsLoop), or nil
	listing  bool       // endsLoop runs
	times    []*timesQuery
	timing   bool // timesLoop runs
	// answered keeps offsetsAfter's answers that name an offset, for
	// timesKeep: a partition's first offset at or after a time does not
	// change once it exists (offsets only grow; retention and a
	// recreated topic are what the bound is for).
	answered map[timeKey]timeAnswer
	fetches  map[tp][]*fetchWait
	fetching bool   // fetchLoop runs
	round    uint64 // fetch rounds started
	leaders  map[string]topicMeta
}

// topicMeta is what a fetch needs of a topic: its id (Fetch v13 and later
// name topics by id) and each partition's leader.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32
}

// readsFetchBytes caps one partition's answer to one fetch round, and
// readsRequestBytes one request's.
const (
	readsFetchBytes   = 256 << 10
	readsRequestBytes = 16 << 20
)

// readsRetry is how long a round waits before asking again after an error
// (a leader moving, a broker gone).
const readsRetry = 50 * time.Millisecond

func newReads(cl *kgo.Client, committed bool) *reads {
	adm := kadm.NewClient(cl)
	listEnds := adm.ListEndOffsets
	if committed {
		listEnds = adm.ListCommittedOffsets
	}
	return &reads{cl: cl, adm: adm, listEnds: listEnds, committed: committed, fetches: map[tp][]*fetchWait{},
		leaders: map[string]topicMeta{}, answered: map[timeKey]timeAnswer{}}
}

// endsRound is one listing of end offsets shared by its callers.
type endsRound struct {
	topics map[string]bool
	done   chan struct{}
	ends   kadm.ListedOffsets
	err    error
}

// endOffsets returns the end offset of every partition of topics, listed
// after the call. With anyListing, a listing on its way that names every
// topic of topics serves too (it started before the call): what a replay's
// first pass needs, as its last pass reads on from these ends to a listing
// made after its subscriptions went live.
func (r *reads) endOffsets(ctx context.Context, topics []string, anyListing bool) (map[tp]int64, error) {
	round := r.joinEnds(topics, anyListing)
	select {
	case <-round.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return round.endsOf(topics)
}

// joinEnds returns the listing that answers endOffsets(topics, anyListing),
// started or to be started.
func (r *reads) joinEnds(topics []string, anyListing bool) *endsRound {
	r.mu.Lock()
	defer r.mu.Unlock()
	round := r.curEnds
	if !anyListing || round == nil || !round.names(topics) {
		if r.nextEnds == nil {
			r.nextEnds = &endsRound{topics: map[string]bool{}, done: make(chan struct{})}
		}
		round = r.nextEnds
		for _, t := range topics {
			round.topics[t] = true
		}
	}
	if !r.listing {
		r.listing = true
		go r.endsLoop()
	}
	return round
}

// endsOf is what a done round says of topics.
func (round *endsRound) endsOf(topics []string) (map[tp]int64, error) {
	if round.err != nil {
		return nil, round.err
	}
	out := map[tp]int64{}
	for _, t := range topics {
		ps, ok := round.ends[t]
		if !ok {
			return nil, fmt.Errorf("topic %s: %w", t, kerr.UnknownTopicOrPartition)
		}
		for _, o := range ps {
			if o.Err != nil {
				return nil, fmt.Errorf("topic %s partition %d: %w", t, o.Partition, o.Err)
			}
			out[tp{o.Topic, o.Partition}] = o.Offset
		}
	}
	return out, nil
}

// names reports whether the round lists every topic of topics (its topics
// are fixed once it is on its way).
func (e *endsRound) names(topics []string) bool {
	for _, t := range topics {
		if !e.topics[t] {
			return false
		}
	}
	return true
}

func (r *reads) endsLoop() {
	for {
		r.mu.Lock()
		round := r.nextEnds
		r.nextEnds, r.curEnds = nil, round
		if round == nil {
			r.listing = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		topics := make([]string, 0, len(round.topics))
		for t := range round.topics {
			topics = append(topics, t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		round.ends, round.err = r.listEnds(ctx, topics...)
		cancel()
		close(round.done)
	}
}

// timesQuery is one caller's offsetsAfter.
type timesQuery struct {
	want map[tp]int64 // partition -> time (ms), removed once answered
	got  map[tp]int64
	err  error
	done chan struct{}
	gone bool // the caller left (r.mu)
}

// offsetsAfter returns, for each partition of at, the offset of its first
// record at or after that time (Unix ms); -1 where there is none (the
// caller reads from the end).
func (r *reads) offsetsAfter(ctx context.Context, at map[tp]int64) (map[tp]int64, error) {
	if len(at) == 0 {
		return map[tp]int64{}, nil
	}
	q := &timesQuery{want: make(map[tp]int64, len(at)), got: make(map[tp]int64, len(at)), done: make(chan struct{})}
	for k, ms := range at {
		q.want[k] = ms
	}
	r.mu.Lock()
	r.times = append(r.times, q)
	if !r.timing {
		r.timing = true
		go r.timesLoop()
	}
	r.mu.Unlock()
	select {
	case <-q.done:
		return q.got, q.err
	case <-ctx.Done():
		r.mu.Lock()
		q.gone = true
		r.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (r *reads) timesLoop() {
	for {
		r.mu.Lock()
		live := r.times[:0]
		for _, q := range r.times {
			if !q.gone {
				live = append(live, q)
			}
		}
		r.times = live
		r.fromAnswered(time.Now())
		if len(r.times) == 0 {
			r.timing = false
			r.mu.Unlock()
			return
		}
		// This round: layers of queries, each partition at most once a
		// layer (a ListOffsets request names a partition once), at the
		// time of the first query of the layer that asks for it. The 20
		// sessions of a group each ask for their own subscription's time
		// of the same partition: 20 layers, sent at once.
		var layers []map[tp]*timesAsk
		for _, q := range r.times {
			for k, ms := range q.want {
				placed := false
				for _, l := range layers {
					if a, ok := l[k]; !ok {
						l[k] = &timesAsk{ms: ms, qs: []*timesQuery{q}}
						placed = true
					} else if a.ms == ms {
						a.qs = append(a.qs, q)
						placed = true
					}
					if placed {
						break
					}
				}
				if !placed && len(layers) < readsTimeLayers {
					layers = append(layers, map[tp]*timesAsk{k: {ms: ms, qs: []*timesQuery{q}}})
				}
			}
		}
		r.mu.Unlock()
		var wg sync.WaitGroup
		retry := make([]bool, len(layers))
		for i, l := range layers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				retry[i] = r.listTimes(l)
			}()
		}
		wg.Wait()
		r.mu.Lock()
		now := time.Now()
		for _, l := range layers {
			for k, a := range l {
				if a.answered && a.err == nil {
					r.keepAnswer(k, a.ms, a.off, now)
				}
			}
		}
		kept := r.times[:0]
		for _, q := range r.times {
			for _, l := range layers {
				for k, a := range l {
					if !a.answered || !slices.Contains(a.qs, q) {
						continue
					}
					if _, open := q.want[k]; !open {
						continue
					}
					delete(q.want, k)
					if a.err != nil && q.err == nil {
						q.err = fmt.Errorf("list offsets by time, %s/%d: %w", k.topic, k.part, a.err)
					}
					q.got[k] = a.off
				}
			}
			if len(q.want) == 0 || q.err != nil {
				close(q.done)
				continue
			}
			kept = append(kept, q)
		}
		r.times = kept
		r.mu.Unlock()
		for _, again := range retry {
			if again {
				time.Sleep(readsRetry)
				break
			}
		}
	}
}

// timesKeep is how long an answer of offsetsAfter serves the same
// question, and timesKept how many answers are kept at most.
const (
	timesKeep = 10 * time.Second
	timesKept = 1 << 14
)

// timeKey is one question of offsetsAfter: a partition and a time (ms).
type timeKey struct {
	tp
	ms int64
}

type timeAnswer struct {
	off int64
	at  time.Time
}

// fromAnswered answers what it can of the waiting queries from r.answered
// and closes those it answers fully (r.mu held).
func (r *reads) fromAnswered(now time.Time) {
	kept := r.times[:0]
	for _, q := range r.times {
		for k, ms := range q.want {
			if a, ok := r.answered[timeKey{k, ms}]; ok && now.Sub(a.at) < timesKeep {
				q.got[k] = a.off
				delete(q.want, k)
			}
		}
		if len(q.want) == 0 {
			close(q.done)
			continue
		}
		kept = append(kept, q)
	}
	r.times = kept
}

// keepAnswer notes an answer naming an offset (r.mu held); when full, the
// expired answers go, or all of them.
func (r *reads) keepAnswer(k tp, ms, off int64, now time.Time) {
	if off < 0 {
		return // none yet: one may come
	}
	if len(r.answered) >= timesKept {
		for key, a := range r.answered {
			if now.Sub(a.at) >= timesKeep {
				delete(r.answered, key)
			}
		}
		if len(r.answered) >= timesKept {
			clear(r.answered)
		}
	}
	r.answered[timeKey{k, ms}] = timeAnswer{off, now}
}

// readsTimeLayers bounds the ListOffsets requests of one round.
const readsTimeLayers = 64

// timesAsk is one partition's time in one layer of a round, and its answer.
type timesAsk struct {
	ms       int64
	qs       []*timesQuery
	answered bool
	off      int64
	err      error
}

// listTimes sends one layer (kgo splits it per leader) and notes each
// answer in it; true when some partition is to be asked again.
func (r *reads) listTimes(layer map[tp]*timesAsk) (retry bool) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := map[string]int{}
	for k, a := range layer {
		i, ok := byTopic[k.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[k.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = k.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = k.part, a.ms, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sh := range r.cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			retry = true
			continue
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				a, ok := layer[tp{t.Topic, p.Partition}]
				if !ok {
					continue
				}
				err := kerr.ErrorForCode(p.ErrorCode)
				if kerr.IsRetriable(err) {
					retry = true
					continue
				}
				a.answered, a.off, a.err = true, p.Offset, err
			}
		}
	}
	return retry
}

// fetched is one partition's answer to a fetch.
type fetched struct {
	recs []*kgo.Record // from the offset asked on; shared: read only
	// hwm is the partition's high watermark when it answered.
	hwm int64
	// logStart is set (>= 0) when the offset asked is no longer in the
	// log (retention deleted it): the partition goes on from there.
	logStart int64
	err      error
}

// fetchWait is one partition of one caller's fetch.
type fetchWait struct {
	off    int64
	ans    chan fetched // buffered 1
	gone   bool         // the caller left (r.mu)
	joined uint64       // reads.round when it was asked for (r.mu)
}

// fetch returns records of each partition of from, from its offset there
// on, once every partition has an answer: some records, or none when the
// offset is at the high watermark.
func (r *reads) fetch(ctx context.Context, from map[tp]int64) (map[tp]fetched, error) {
	waits := make(map[tp]*fetchWait, len(from))
	r.mu.Lock()
	for k, off := range from {
		w := &fetchWait{off: off, ans: make(chan fetched, 1), joined: r.round}
		waits[k] = w
		r.fetches[k] = append(r.fetches[k], w)
	}
	if !r.fetching {
		r.fetching = true
		go r.fetchLoop()
	}
	r.mu.Unlock()
	out := make(map[tp]fetched, len(from))
	for k, w := range waits {
		select {
		case f := <-w.ans:
			out[k] = f
		case <-ctx.Done():
			r.mu.Lock()
			for _, w := range waits {
				w.gone = true
			}
			r.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (r *reads) fetchLoop() {
	for {
		r.mu.Lock()
		from := map[tp]int64{}
		for k, ws := range r.fetches {
			live := ws[:0]
			for _, w := range ws {
				if !w.gone {
					live = append(live, w)
				}
			}
			if len(live) == 0 {
				delete(r.fetches, k)
				continue
			}
			r.fetches[k] = live
			low := live[0].off
			for _, w := range live[1:] {
				low = min(low, w.off)
			}
			from[k] = low
		}
		if len(from) == 0 {
			r.fetching = false
			r.mu.Unlock()
			return
		}
		r.round++
		round := r.round
		r.mu.Unlock()
		answers, progress := r.fetchRound(from)
		r.mu.Lock()
		r.settle(round, from, answers)
		r.mu.Unlock()
		if !progress {
			time.Sleep(readsRetry)
		}
	}
}

// settle hands the answers of round (fetched from the offsets of from) to
// the fetches that were waiting when it started (r.mu held). One asked for
// while the round was on its way waits for the next: the answer may be
// older than what its caller knows (a high watermark below the end offset
// it listed since, which read as "nothing more there" skipped the
// records in between: one message lost in the sessions soak).
func (r *reads) settle(round uint64, from map[tp]int64, answers map[tp]fetched) {
	for k, f := range answers {
		ws := r.fetches[k]
		kept := ws[:0]
		for _, w := range ws {
			if w.gone {
				continue
			}
			if w.joined < round {
				if a, ok := answerFor(w.off, from[k], f); ok {
					w.ans <- a
					continue
				}
			}
			kept = append(kept, w)
		}
		if len(kept) == 0 {
			delete(r.fetches, k)
		} else {
			r.fetches[k] = kept
		}
	}
}

// answerFor is what a fetch from off gets of an answer to a fetch from
// asked (<= off); false: the answer does not reach off (it waits).
func answerFor(off, asked int64, f fetched) (fetched, bool) {
	if f.err != nil {
		return f, true
	}
	if off < asked {
		// Asked for while the round was on its way, from further back:
		// the answer has none of its first records.
		return fetched{}, false
	}
	if f.logStart >= 0 {
		if off < f.logStart {
			return fetched{hwm: f.hwm, logStart: f.logStart}, true
		}
		return fetched{}, false
	}
	if off >= f.hwm {
		return fetched{hwm: f.hwm, logStart: -1}, true
	}
	// Offsets ascend in an answer: a storm's resumes each look their own
	// session's record up in an answer of hundreds.
	if i, _ := slices.BinarySearchFunc(f.recs, off, func(r *kgo.Record, o int64) int { return cmp.Compare(r.Offset, o) }); i < len(f.recs) {
		return fetched{recs: f.recs[i:], hwm: f.hwm, logStart: -1}, true
	}
	// Nothing at or after off here. A fetch from off itself that came back
	// empty below the high watermark still answers (a partition's last
	// records can be a transaction marker the broker sends as a batch of
	// its own; the caller asks again from there).
	if off == asked && len(f.recs) == 0 {
		return fetched{hwm: f.hwm, logStart: -1}, true
	}
	return fetched{}, false
}

// fetchRound fetches every partition of from once, one request per
// leader; progress is false when nothing was answered (the caller waits
// before the next round).
func (r *reads) fetchRound(from map[tp]int64) (map[tp]fetched, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := map[string]bool{}
	for k := range from {
		topics[k.topic] = true
	}
	r.mu.Lock()
	var unknown []string
	for t := range topics {
		if _, ok := r.leaders[t]; !ok {
			unknown = append(unknown, t)
		}
	}
	r.mu.Unlock()
	answers := map[tp]fetched{}
	if len(unknown) > 0 {
		md, err := r.adm.Metadata(ctx, unknown...)
		if err != nil {
			return answers, false
		}
		r.mu.Lock()
		for _, td := range md.Topics {
			if td.Err != nil {
				if !kerr.IsRetriable(td.Err) {
					for k := range from {
						if k.topic == td.Topic {
							answers[k] = fetched{err: fmt.Errorf("topic %s: %w", td.Topic, td.Err), logStart: -1}
						}
					}
				}
				continue
			}
			m := topicMeta{id: td.ID, leaders: map[int32]int32{}}
			for _, p := range td.Partitions {
				m.leaders[p.Partition] = p.Leader
			}
			r.leaders[td.Topic] = m
		}
		r.mu.Unlock()
	}
	// One request per leader.
	reqs := map[int32]*kmsg.FetchRequest{}
	r.mu.Lock()
	for k, off := range from {
		m, ok := r.leaders[k.topic]
		if !ok {
			continue
		}
		leader, ok := m.leaders[k.part]
		if !ok || leader < 0 {
			delete(r.leaders, k.topic) // a partition added, or no leader now
			continue
		}
		req := reqs[leader]
		if req == nil {
			req = kmsg.NewPtrFetchRequest()
			req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 1, readsRequestBytes
			req.SessionEpoch = -1
			if r.committed {
				req.IsolationLevel = 1 // read_committed: up to the last stable offset, with the aborted transactions
			}
			reqs[leader] = req
		}
		i := len(req.Topics) - 1
		for j, rt := range req.Topics {
			if rt.Topic == k.topic {
				i = j
				break
			}
		}
		if i < 0 || req.Topics[i].Topic != k.topic {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = k.topic, m.id
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = k.part, off, readsFetchBytes
		rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	r.mu.Unlock()
	type result struct {
		leader int32
		req    *kmsg.FetchRequest
		resp   *kmsg.FetchResponse
		err    error
	}
	results := make(chan result, len(reqs))
	for leader, req := range reqs {
		go func() {
			resp, err := r.cl.Broker(int(leader)).Request(ctx, req)
			fr, _ := resp.(*kmsg.FetchResponse)
			results <- result{leader, req, fr, err}
		}()
	}
	iso := kgo.ReadUncommitted()
	if r.committed {
		iso = kgo.ReadCommitted()
	}
	progress := false
	for range reqs {
		res := <-results
		if res.err == nil && res.resp.ErrorCode != 0 {
			res.err = kerr.ErrorForCode(res.resp.ErrorCode)
		}
		if res.err != nil {
			r.forget(res.req) // asked again, after a metadata request
			continue
		}
		names := map[[16]byte]string{}
		for _, rt := range res.req.Topics {
			names[rt.TopicID] = rt.Topic
		}
		for _, t := range res.resp.Topics {
			name := t.Topic
			if name == "" {
				name = names[t.TopicID]
			}
			for i := range t.Partitions {
				rp := &t.Partitions[i]
				k := tp{name, rp.Partition}
				off, asked := from[k]
				if !asked {
					continue
				}
				// read_committed: the aborted transactions' records are
				// left out (their markers stay), and the end is the last
				// stable offset.
				fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{KeepControlRecords: true, Offset: off,
					IsolationLevel: iso, Topic: name, Partition: rp.Partition}, rp, kgo.DefaultDecompressor(), nil)
				hwm := rp.HighWatermark
				if r.committed && rp.LastStableOffset >= 0 {
					hwm = rp.LastStableOffset
				}
				switch {
				case errors.Is(fp.Err, kerr.OffsetOutOfRange) && off < rp.LogStartOffset:
					answers[k] = fetched{hwm: hwm, logStart: rp.LogStartOffset}
				case fp.Err != nil && kerr.IsRetriable(fp.Err):
					r.mu.Lock()
					delete(r.leaders, name)
					r.mu.Unlock()
					continue
				case fp.Err != nil:
					answers[k] = fetched{err: fmt.Errorf("fetch %s/%d: %w", name, rp.Partition, fp.Err), logStart: -1}
				default:
					answers[k] = fetched{recs: fp.Records, hwm: hwm, logStart: -1}
				}
				progress = true
			}
		}
	}
	return answers, progress
}

// forget drops the leaders of a failed request's topics.
func (r *reads) forget(req *kmsg.FetchRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rt := range req.Topics {
		delete(r.leaders, rt.Topic)
	}
}

// record is a state.TableConfig.Fetch for topic: the record at a
// partition's offset, through the shared fetches (the resumes of a storm
// read their sessions' records together).
func (r *reads) record(topic string) func(ctx context.Context, part int32, off int64) ([]byte, []byte, error) {
	return func(ctx context.Context, part int32, off int64) ([]byte, []byte, error) {
		k := tp{topic, part}
		got, err := r.fetch(ctx, map[tp]int64{k: off})
		if err != nil {
			return nil, nil, err
		}
		f := got[k]
		if f.err != nil {
			return nil, nil, f.err
		}
		if len(f.recs) > 0 && f.recs[0].Offset == off && !f.recs[0].Attrs.IsControl() {
			return f.recs[0].Key, f.recs[0].Value, nil
		}
		return nil, nil, nil // not there (compacted away): the caller reads on
	}
}
