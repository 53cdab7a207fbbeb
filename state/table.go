package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/lz4frame"
)

// TableConfig configures a Table.
type TableConfig struct {
	// Brokers is the Kafka bootstrap list.
	Brokers []string
	// Topic is the compacted topic holding the table.
	Topic string
	// Partitions and ReplicationFactor are used when the topic is created;
	// ReplicationFactor -1 takes the cluster's default.replication.factor.
	Partitions        int32
	ReplicationFactor int16
	// Opts are extra franz-go options (TLS, SASL, client id).
	Opts []kgo.Opt
	// WriteTimeout bounds one Put or Delete, retries included.
	WriteTimeout time.Duration
	// Tag, if not nil, sorts each value into one of a few kinds (a session
	// online or offline, say) when it enters the table; Count returns how
	// many keys have each kind, without reading the table.
	Tag func(value []byte) uint8
	// Keep, if not nil, says which values stay in memory once read or
	// written; for the others the table keeps only where the record is
	// (its partition and offset), and Read reads it from Kafka again
	// through Fetch, which Keep requires. Tag sees every value first.
	Keep func(value []byte) bool
	// Fetch reads the record of the topic at partition and offset (key and
	// value read only; nil, nil: no record there now, compacted away).
	Fetch func(ctx context.Context, partition int32, offset int64) (key, value []byte, err error)
}

// Change is one record of the table as the reader applied it.
type Change struct {
	Key    string
	Value  []byte // nil: deleted (tombstone)
	Offset int64
	// Superseded marks a record older than a write of this instance that
	// the table already holds for the key (applied at its acknowledgement,
	// before the reader got here): the table did not apply it, but a
	// watcher still learns that it was written (another owner's claim that
	// landed before this instance's own write, for one).
	Superseded bool
}

// Table is a compacted Kafka topic read into memory. See the package doc
// for its contract. New -> Run (reads until Close) -> Close.
type Table struct {
	cfg   TableConfig
	log   *slog.Logger
	cl    *kgo.Client
	admin *kadm.Client

	mu       sync.Mutex
	rows     map[string]row
	counts   map[uint8]int   // keys with a value, by Tag
	pos      map[int32]int64 // next offset to read, per partition
	progress chan struct{}   // closed and replaced whenever pos moves
	watch    func(Change)
	index    *keyIndex // the keys in order, for Page (nil until the first)

	// Syncs share listings of the end offsets (sharedEndOffsets).
	lmu     sync.Mutex
	lnext   *listing // the listing the next Sync joins; nil: none asked
	listing bool     // listLoop runs

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	loaded   chan struct{}
}

// row is one key's latest record. Small: a fleet's offline sessions are
// rows on every instance (a pointer, not a slice, for the value most rows
// do not keep: 24 bytes a row instead of 40).
type row struct {
	val    *[]byte // nil: a tombstone not yet read back, or not kept (gone)
	offset int64
	part   int32
	tag    uint8 // TableConfig.Tag of value
	gone   bool  // a value TableConfig.Keep left in Kafka
}

// present reports whether the row stands for a value (in memory or not).
func (r row) present() bool { return r.val != nil || r.gone }

// value is the value in memory (nil: none).
func (r row) value() []byte {
	if r.val == nil {
		return nil
	}
	return *r.val
}

// rowOf is the row for a record's value (nil: a tombstone).
func rowOf(value []byte, offset int64, part int32) row {
	r := row{offset: offset, part: part}
	if value != nil {
		r.val = &value
	}
	return r
}

// set stores r under k and keeps the counts by tag (t.mu held). A value
// Keep does not keep is dropped here; copy says whether a kept one must be
// copied first (it is a slice of a fetch's buffer).
func (t *Table) set(k string, r row, copy bool) {
	if v := r.value(); v != nil {
		if t.cfg.Tag != nil {
			r.tag = t.cfg.Tag(v)
		}
		switch {
		case t.cfg.Keep != nil && !t.cfg.Keep(v):
			r.val, r.gone = nil, true
		case copy:
			c := bytes.Clone(v)
			r.val = &c
		}
	}
	t.uncount(k)
	if _, ok := t.rows[k]; !ok && t.index != nil {
		t.index.add(k)
	}
	t.rows[k] = r
	if r.present() {
		t.counts[r.tag]++
	}
}

// remove deletes k (t.mu held).
func (t *Table) remove(k string) {
	t.uncount(k)
	delete(t.rows, k)
}

func (t *Table) uncount(k string) {
	if cur, ok := t.rows[k]; ok && cur.present() {
		t.counts[cur.tag]--
	}
}

// ErrClosed is returned by a Table after Close.
var ErrClosed = errors.New("state: table closed")

// Open starts a table: in the background it creates the topic when it is
// missing (cleanup.policy=compact; retried until Kafka answers) and reads it
// from its first record; Loaded is closed once everything that was in it at
// the start has been read. watch, if not nil, is called for every record
// read, on the reader's goroutine, without the table's lock held: it must
// not block for long. Writes and Sync work before the load is complete
// (Sync waits for it).
func Open(cfg TableConfig, log *slog.Logger, watch func(Change)) (*Table, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.Keep != nil && cfg.Fetch == nil {
		return nil, fmt.Errorf("state %s: TableConfig.Keep needs Fetch", cfg.Topic)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// lz4 frames of 64 KiB blocks (package lz4frame), not franz-go's
		// default snappy: Kafka checks a compressed batch by decompressing
		// it, and its snappy reader allocates fresh buffers for every batch
		// (its lz4 reader reuses the request thread's). A reconnect storm
		// writes a claim per session: with snappy a third of what Kafka
		// allocated in the storm, its heap full and its G1 in full
		// collections (docs/sessions.md). A table's readers size their
		// buffers by the frame's blocks.
		kgo.WithCompressor(lz4frame.Compressor{}),
		kgo.RecordDeliveryTimeout(cfg.WriteTimeout),
		kgo.FetchMaxWait(time.Second),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("state %s: client: %w", cfg.Topic, err)
	}
	t := &Table{
		cfg: cfg, log: log.With("component", "state", "topic", cfg.Topic), cl: cl, admin: kadm.NewClient(cl),
		rows: make(map[string]row), counts: make(map[uint8]int), pos: make(map[int32]int64), progress: make(chan struct{}), watch: watch,
		stop: make(chan struct{}), done: make(chan struct{}), loaded: make(chan struct{}),
	}
	go t.read()
	go t.load()
	return t, nil
}

// Loaded is closed once the table holds everything that was in the topic
// when it opened.
func (t *Table) Loaded() <-chan struct{} { return t.loaded }

// load creates the topic if needed and waits for the reader to pass the
// end offsets, retrying until it succeeds or the table closes.
func (t *Table) load() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for wait := 250 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		actx, acancel := context.WithTimeout(ctx, t.cfg.WriteTimeout)
		err := t.ensureTopic(actx)
		if err == nil {
			err = t.Sync(actx)
		}
		acancel()
		if err == nil {
			close(t.loaded)
			t.log.Info("state table loaded", "keys", t.Len())
			return
		}
		t.log.Warn("state table not loaded yet (retrying)", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// ensureTopic creates the compacted topic, or checks that it exists.
func (t *Table) ensureTopic(ctx context.Context) error {
	cfgs := map[string]*string{
		"cleanup.policy":         ptr("compact"),
		"message.timestamp.type": ptr("LogAppendTime"),
		// Compaction only cleans closed segments: roll hourly so that old
		// values go within hours, not the 7-day default.
		"segment.ms": ptr(strconv.Itoa(int(time.Hour / time.Millisecond))),
	}
	for attempt := 0; ; attempt++ {
		res, err := t.admin.CreateTopic(ctx, t.cfg.Partitions, t.cfg.ReplicationFactor, cfgs, t.cfg.Topic)
		if err == nil && res.Err == nil {
			// Kafka says the replication factor it applied (CreateTopics
			// v5+): the cluster's own for -1.
			rf := res.ReplicationFactor
			if rf <= 0 {
				rf = t.cfg.ReplicationFactor
			}
			t.log.Info("created state topic", "partitions", t.cfg.Partitions, "replication_factor", rf)
			return nil
		}
		if errors.Is(res.Err, kerr.TopicAlreadyExists) {
			return nil
		}
		if err == nil {
			err = res.Err
		}
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			// Not allowed to create: fine when it exists.
			md, merr := t.admin.ListTopics(ctx, t.cfg.Topic)
			if merr == nil && md.Has(t.cfg.Topic) {
				return nil
			}
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable || attempt >= 20 || ctx.Err() != nil {
			return fmt.Errorf("state: create topic %s: %w", t.cfg.Topic, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("state: create topic %s: %w", t.cfg.Topic, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func ptr(s string) *string { return &s }

// read applies records until Close.
func (t *Table) read() {
	defer close(t.done)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-t.stop
		cancel()
	}()
	for ctx.Err() == nil {
		fs := t.cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		recreated := false
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, kerr.UnknownTopicID) {
				recreated = true
			}
			t.log.Warn("state read error", "partition", p, "err", err)
		})
		if recreated {
			// Deleted and created again (or a Kafka that lost its data):
			// read the new topic from its start; what is in memory stays
			// until it is overwritten.
			t.cl.PurgeTopicsFromConsuming(t.cfg.Topic)
			t.mu.Lock()
			t.pos = make(map[int32]int64)
			for k, r := range t.rows {
				if r.gone { // nothing of it in memory, nor in the new topic
					t.remove(k)
					continue
				}
				r.offset = -1
				t.rows[k] = r
			}
			t.mu.Unlock()
			t.cl.AddConsumeTopics(t.cfg.Topic)
		}
		var changes []Change
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			t.mu.Lock()
			for _, r := range p.Records {
				// One string for the key: the row and whoever keeps the
				// change (the Wills keeper, per offline session on every
				// instance) share its bytes.
				k := string(r.Key)
				if applied := t.apply(k, r); t.watch != nil {
					changes = append(changes, Change{Key: k, Value: r.Value, Offset: r.Offset, Superseded: !applied})
				}
			}
			t.pos[p.Partition] = p.Records[len(p.Records)-1].Offset + 1
			t.mu.Unlock()
		})
		t.mu.Lock()
		close(t.progress)
		t.progress = make(chan struct{})
		watch := t.watch
		t.mu.Unlock()
		if watch != nil {
			for _, c := range changes {
				watch(c)
			}
		}
		if fs.NumRecords() == 0 && fs.Err() != nil {
			select { // do not spin on a persistent error
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// apply applies one record read from the log, its key k (t.mu held);
// false when a local write at a later offset already stands for the key.
func (t *Table) apply(k string, r *kgo.Record) bool {
	if cur, ok := t.rows[k]; ok && cur.part == r.Partition && cur.offset > r.Offset {
		return false
	}
	if r.Value == nil {
		t.remove(k) // the reader is past every older record of k
		return true
	}
	// Copied when kept: r.Value is a slice of the fetch's buffer, which
	// holds every other record of the fetch too (older values of this and
	// other keys).
	t.set(k, rowOf(r.Value, r.Offset, r.Partition), true)
	return true
}

// Sync returns once every record appended before the call has been read.
// Concurrent Syncs share one listing of the end offsets: each joins the
// next listing to start after it was called (a storm of CONNECTs asks
// Kafka once per round trip, not once per client).
func (t *Table) Sync(ctx context.Context) error {
	ends, err := t.sharedEndOffsets(ctx)
	if err != nil {
		return err
	}
	for {
		t.mu.Lock()
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			if t.pos[o.Partition] < o.Offset {
				behind = true
			}
		})
		progress := t.progress
		t.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("state %s: sync: %w", t.cfg.Topic, ctx.Err())
		case <-t.stop:
			return ErrClosed
		}
	}
}

// listing is one listing of the end offsets that Syncs wait for.
type listing struct {
	done chan struct{} // closed once ends and err are set
	ends kadm.ListedOffsets
	err  error
}

// sharedEndOffsets returns the end offsets of a listing that started after
// the call: it joins the one waiting to start (listLoop starts it once the
// listing before it has ended), so every caller that arrived meanwhile
// shares it, and each still reads at least up to where the topic ended
// when it asked.
func (t *Table) sharedEndOffsets(ctx context.Context) (kadm.ListedOffsets, error) {
	t.lmu.Lock()
	if t.lnext == nil {
		t.lnext = &listing{done: make(chan struct{})}
	}
	l := t.lnext
	if !t.listing {
		t.listing = true
		go t.listLoop()
	}
	t.lmu.Unlock()
	select {
	case <-l.done:
		return l.ends, l.err
	case <-ctx.Done():
		return nil, fmt.Errorf("state %s: sync: %w", t.cfg.Topic, ctx.Err())
	case <-t.stop:
		return nil, ErrClosed
	}
}

// listLoop runs the listings Syncs asked for, one after the other, until
// none is asked.
func (t *Table) listLoop() {
	for {
		t.lmu.Lock()
		l := t.lnext
		t.lnext = nil
		if l == nil {
			t.listing = false
			t.lmu.Unlock()
			return
		}
		t.lmu.Unlock()
		// Its waiters give up on their own contexts; this one bounds a
		// listing nobody waits for any more.
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.WriteTimeout)
		l.ends, l.err = t.endOffsets(ctx)
		cancel()
		close(l.done)
	}
}

// endOffsets lists the topic's end offsets, retrying what Kafka calls
// retriable (a topic just created is unknown to some brokers for a moment)
// until ctx ends.
func (t *Table) endOffsets(ctx context.Context) (kadm.ListedOffsets, error) {
	for attempt := 0; ; attempt++ {
		ends, err := t.admin.ListEndOffsets(ctx, t.cfg.Topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			return ends, nil
		}
		if attempt == 10 && errors.Is(err, kerr.UnknownTopicOrPartition) {
			_ = t.ensureTopic(ctx) // gone: create it again
		}
		var ke *kerr.Error
		if !errors.As(err, &ke) || !ke.Retriable || ctx.Err() != nil {
			return nil, fmt.Errorf("state %s: list end offsets: %w", t.cfg.Topic, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("state %s: list end offsets: %w", t.cfg.Topic, err)
		case <-t.stop:
			return nil, ErrClosed
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Get returns the key's value as last read or written here, if the table
// keeps it in memory (TableConfig.Keep; Read reads the others).
func (t *Table) Get(key string) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[key]
	if !ok || r.val == nil {
		return nil, false // absent, or deleted here and not yet read back
	}
	return r.value(), true
}

// Read returns the key's value as last read or written here, from memory
// or, for a value TableConfig.Keep left in Kafka, from its record there.
// The value is read only.
func (t *Table) Read(ctx context.Context, key string) ([]byte, bool, error) {
	for range 3 {
		t.mu.Lock()
		r, ok := t.rows[key]
		t.mu.Unlock()
		if !ok || !r.present() {
			return nil, false, nil
		}
		if !r.gone {
			return r.value(), true, nil
		}
		k, v, err := t.cfg.Fetch(ctx, r.part, r.offset)
		if err != nil {
			return nil, false, fmt.Errorf("state %s: read %q: %w", t.cfg.Topic, key, err)
		}
		if v != nil && string(k) == key {
			return v, true, nil
		}
		// Compacted away: a newer record of the key is there, which the
		// reader applies before Sync returns.
		if err := t.Sync(ctx); err != nil {
			return nil, false, fmt.Errorf("state %s: read %q: %w", t.cfg.Topic, key, err)
		}
	}
	return nil, false, fmt.Errorf("state %s: read %q: its record is not where the table says", t.cfg.Topic, key)
}

// Each calls fn for every key and value in memory (a snapshot; fn may call
// the table; values TableConfig.Keep left in Kafka are not in it).
func (t *Table) Each(fn func(key string, value []byte)) {
	t.mu.Lock()
	snap := make(map[string][]byte, len(t.rows))
	for k, r := range t.rows {
		if r.val != nil {
			snap[k] = r.value()
		}
	}
	t.mu.Unlock()
	for k, v := range snap {
		fn(k, v)
	}
}

// Count is the number of keys whose value TableConfig.Tag sorts into tag
// (every key with a value is tag 0 without a Tag function).
func (t *Table) Count(tag uint8) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[tag]
}

// Len is the number of keys.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// Put writes key = value and returns once Kafka has acknowledged it
// (acks=all). value must not be nil (use Delete).
func (t *Table) Put(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return t.write(ctx, key, value)
}

// Delete writes a tombstone for key and returns once Kafka has
// acknowledged it.
func (t *Table) Delete(ctx context.Context, key string) error { return t.write(ctx, key, nil) }

func (t *Table) write(ctx context.Context, key string, value []byte) error {
	for attempt := 0; ; attempt++ {
		err := t.writeOnce(ctx, key, value)
		if attempt == 0 && errors.Is(err, kerr.UnknownTopicOrPartition) {
			// The topic is gone (deleted, or a Kafka that lost its data):
			// create it again and write once more.
			if cerr := t.ensureTopic(ctx); cerr == nil {
				continue
			}
		}
		return err
	}
}

func (t *Table) writeOnce(ctx context.Context, key string, value []byte) error {
	res := make(chan error, 1)
	t.WriteAsync(key, value, func(err error) { res <- err })
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("state %s: write %q: %w", t.cfg.Topic, key, err)
		}
		return nil
	case <-ctx.Done():
		// The record may still be written: a record already in a request is
		// not failed by a context, RecordDeliveryTimeout bounds it.
		return fmt.Errorf("state %s: write %q: %w", t.cfg.Topic, key, ctx.Err())
	}
}

// WriteAsync writes key = value (nil: a tombstone) and calls done once
// Kafka has acknowledged it (acks=all) or it failed (within
// TableConfig.WriteTimeout). Writes of one key are appended in the order of
// the calls. done runs on a client goroutine: it must not block.
func (t *Table) WriteAsync(key string, value []byte, done func(error)) {
	select {
	case <-t.stop:
		done(ErrClosed)
		return
	default:
	}
	rec := &kgo.Record{Topic: t.cfg.Topic, Key: []byte(key), Value: value}
	t.cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err == nil {
			t.applyWrite(key, value, r)
		}
		done(err)
	})
}

// applyWrite applies an acknowledged write at once, so that this instance
// reads its own writes before the reader gets to them.
func (t *Table) applyWrite(key string, value []byte, r *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.rows[key]; ok && cur.part == r.Partition && cur.offset >= r.Offset {
		return
	}
	if r.Offset < t.pos[r.Partition] && value == nil {
		t.remove(key) // the reader is already past it
		return
	}
	// A tombstone stays as a nil row until the reader passes it: an older
	// record of the key read later must not bring the key back.
	t.set(key, rowOf(value, r.Offset, r.Partition), false)
}

// Flush waits until every write issued so far is acknowledged or failed,
// or ctx ends.
func (t *Table) Flush(ctx context.Context) error {
	if err := t.cl.Flush(ctx); err != nil {
		return fmt.Errorf("state %s: flush: %w", t.cfg.Topic, err)
	}
	return nil
}

// Close stops reading and releases the client. Safe to call more than once.
func (t *Table) Close() {
	t.stopOnce.Do(func() {
		close(t.stop)
		t.cl.Close()
		<-t.done
	})
}
