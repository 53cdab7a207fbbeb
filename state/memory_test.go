package state

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTableHoldsOnlyLatestValues: a table keeps, per key, the bytes of its
// latest value and no more. The records of a fetch share one buffer; a row
// that kept a slice of it would keep every older record of the fetch alive
// too (a session's claim, subscribe and disconnect records, read at start
// on every instance). 2,000 keys of 800 B values, each written 4 times in a
// shuffled order (as a fleet's sessions are): the table's heap must grow by
// less than twice the latest values.
func TestTableHoldsOnlyLatestValues(t *testing.T) {
	brokers := newCluster(t)
	const keys, versions, size = 2000, 4, 800
	openTable(t, brokers, nil).Close() // creates the topic
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("_ferry_test"),
		kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	// Each key's versions in order, the keys interleaved at random.
	next := make([]int, keys)
	order := make([]int, 0, keys*versions)
	for k := range keys {
		for range versions {
			order = append(order, k)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	recs := make([]*kgo.Record, 0, len(order))
	for _, k := range order {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte('a' + (k+next[k]+i)%26)
		}
		next[k]++
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "client-%d", k), Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Closed before the heap is read: the writer's buffers are not the table's.
	cl.Close()
	recs = nil
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	tb := openTable(t, brokers, nil)
	if n := tb.Len(); n != keys {
		t.Fatalf("table has %d keys, want %d", n, keys)
	}
	after := settledHeap(heap)
	grew := int64(after) - int64(before)
	per := float64(grew) / keys
	t.Logf("%d keys of %d B values (each written %d times): table heap %.0f B per key", keys, size, versions, per)
	if per > 2*size {
		t.Fatalf("the table holds %.0f B per key for %d B values: it keeps more than each key's latest value", per, size)
	}
	runtime.KeepAlive(tb)
}

// TestTableKeepsOnlyWhatKeepSays: with TableConfig.Keep, a value it does
// not keep costs the table its key and where its record is, not its bytes
// (the sessions an instance does not serve), and Read still returns it,
// from Kafka; a kept one stays in memory. 2,000 keys of 800 B values, one
// in ten kept: the table's heap must grow by far less than the values.
func TestTableKeepsOnlyWhatKeepSays(t *testing.T) {
	brokers := newCluster(t)
	const keys, size = 2000, 800
	openTable(t, brokers, nil).Close() // creates the topic
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("_ferry_test"),
		kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	value := func(k int) []byte {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte('a' + (k+i)%26)
		}
		if k%10 == 0 {
			copy(v, "keep")
		}
		return v
	}
	recs := make([]*kgo.Record, 0, keys)
	for k := range keys {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "client-%d", k), Value: value(k)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Closed before the heap is read: the writer's buffers are not the table's.
	cl.Close()
	recs = nil
	var fetches atomic.Int64
	fetch := func(ctx context.Context, part int32, off int64) ([]byte, []byte, error) {
		fetches.Add(1)
		r, err := fetchOne(ctx, brokers, "_ferry_test", part, off)
		if err != nil || r == nil {
			return nil, nil, err
		}
		return r.Key, r.Value, nil
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	tb, err := Open(TableConfig{Brokers: brokers, Topic: "_ferry_test", Partitions: 4, ReplicationFactor: 1,
		Keep: func(v []byte) bool { return bytes.HasPrefix(v, []byte("keep")) }, Fetch: fetch}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	<-tb.Loaded()
	if n := tb.Len(); n != keys {
		t.Fatalf("table has %d keys, want %d", n, keys)
	}
	after := settledHeap(heap)
	per := float64(int64(after)-int64(before)) / keys
	tb.mu.Lock()
	inMemory := 0
	for _, r := range tb.rows {
		if r.val != nil {
			inMemory++
		}
	}
	tb.mu.Unlock()
	if inMemory != keys/10 {
		t.Errorf("%d of %d values in memory, want the %d Keep keeps", inMemory, keys, keys/10)
	}
	t.Logf("%d keys of %d B values, one in ten kept: table heap %.0f B per key", keys, size, per)
	if per > size/2 {
		t.Errorf("the table holds %.0f B per key for %d B values of which one in ten is kept: it keeps the others too", per, size)
	}
	for _, k := range []int{0, 1, 7, 10, 1999} {
		v, ok, err := tb.Read(ctx, fmt.Sprintf("client-%d", k))
		if err != nil || !ok || !bytes.Equal(v, value(k)) {
			t.Fatalf("Read client-%d: %.8q (present %v, %v)", k, v, ok, err)
		}
	}
	if n := fetches.Load(); n != 3 {
		t.Errorf("5 Reads, 2 of kept values: %d fetches from Kafka, want 3", n)
	}
	if _, ok, err := tb.Read(ctx, "nobody"); ok || err != nil {
		t.Errorf("Read of an absent key: present %v, %v", ok, err)
	}
}

// fetchOne reads the record at partition/offset of topic (nil if none).
func fetchOne(ctx context.Context, brokers []string, topic string, part int32, off int64) (*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(off)}}))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, r := range fs.Records() {
			if r.Offset == off {
				return r, nil
			}
			if r.Offset > off {
				return nil, nil
			}
		}
	}
}

// settledHeap is the least of a few readings of heap, 200 ms apart: a
// fetch the client still holds for a moment is not the table's.
func settledHeap(heap func() uint64) uint64 {
	after := heap()
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		after = min(after, heap())
	}
	return after
}

// TestChangeSharesTheRowsKey: the key a watcher is handed is the string the
// table's row holds, not a second copy of its bytes. Every instance's Wills
// keeper keeps the key of every offline session it reads, so a copy of its
// own was one more allocation per session of the fleet on every instance.
// Two writes of the same key from another client, read by the table: both
// changes and the row name one string.
func TestChangeSharesTheRowsKey(t *testing.T) {
	brokers := newCluster(t)
	var mu sync.Mutex
	var keys []string
	tb := openTable(t, brokers, func(c Change) {
		if c.Key == "client-shared" {
			mu.Lock()
			keys = append(keys, c.Key)
			mu.Unlock()
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("_ferry_test"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range []string{"one", "two"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("client-shared"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 {
		t.Fatalf("watcher saw %d changes of the key, want 2", len(keys))
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for k := range tb.rows {
		if k != "client-shared" {
			continue
		}
		if unsafe.StringData(k) != unsafe.StringData(keys[1]) {
			t.Fatalf("the row's key and the latest change's key are two copies of the bytes")
		}
		return
	}
	t.Fatal("no row for the key")
}
