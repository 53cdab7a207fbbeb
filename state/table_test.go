package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/internal/lz4frame"
)

func newCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func openTable(t *testing.T, brokers []string, watch func(Change)) *Table {
	t.Helper()
	tb, err := Open(TableConfig{Brokers: brokers, Topic: "_ferry_test", Partitions: 4, ReplicationFactor: 1}, nil, watch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Close)
	select {
	case <-tb.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("table not loaded within 10 s")
	}
	return tb
}

func TestTableReadYourWrites(t *testing.T) {
	brokers := newCluster(t)
	a := openTable(t, brokers, nil)
	b := openTable(t, brokers, nil)
	ctx := context.Background()
	// Many keys, each written then read on the other table right after its
	// Sync: a Get without the Sync may miss it; with it, never.
	for i := range 200 {
		key := fmt.Sprintf("client-%d", i%17)
		want := fmt.Sprintf("v%d", i)
		if err := a.Put(ctx, key, []byte(want)); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		got, ok := b.Get(key)
		if !ok || string(got) != want {
			t.Fatalf("write %d: after Sync the other table has %q (present %v), want %q", i, got, ok, want)
		}
	}
	if err := a.Delete(ctx, "client-3"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get("client-3"); ok {
		t.Fatal("deleted key still present on the writer")
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get("client-3"); ok {
		t.Fatal("deleted key still present on the reader after Sync")
	}
	if b.Len() != 16 {
		t.Fatalf("reader has %d keys, want 16", b.Len())
	}
}

func TestTableLoadsOnOpenAndKeepsEmptyApartFromDeleted(t *testing.T) {
	brokers := newCluster(t)
	a := openTable(t, brokers, nil)
	ctx := context.Background()
	for _, kv := range [][2]string{{"x", "1"}, {"y", "2"}, {"x", "3"}, {"empty", ""}} {
		if err := a.Put(ctx, kv[0], []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Delete(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []Change
	b := openTable(t, brokers, func(c Change) { mu.Lock(); seen = append(seen, c); mu.Unlock() })
	if v, ok := b.Get("x"); !ok || string(v) != "3" {
		t.Fatalf("x = %q %v, want 3", v, ok)
	}
	if _, ok := b.Get("y"); ok {
		t.Fatal("y was deleted, still present after a fresh load")
	}
	if v, ok := b.Get("empty"); !ok || v == nil || len(v) != 0 {
		t.Fatalf("an empty value must stay a present, empty value (a tombstone is a null value): got %v %v", v, ok)
	}
	// The watcher sees every record read: the 5 of the load, then a write.
	if err := a.Put(ctx, "z", []byte("9")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		var last Change
		if n > 0 {
			last = seen[n-1]
		}
		mu.Unlock()
		if n == 6 && last.Key == "z" && string(last.Value) == "9" {
			break
		}
		if n > 6 || time.Now().After(deadline) {
			t.Fatalf("watcher saw %d changes (last %+v), want the 5 loaded and z", n, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTableWatcherSeesRecordsSupersededByOwnWrite: a record another table
// wrote before this one's own write of the key, but read only after that
// write was acknowledged (and applied at once), is not applied, yet the
// watcher sees it, marked Superseded. A session owner learns so that a
// newer owner claimed the session before its own late write.
func TestTableWatcherSeesRecordsSupersededByOwnWrite(t *testing.T) {
	brokers := newCluster(t)
	other := openTable(t, brokers, nil)
	var mu sync.Mutex
	var seen []Change
	own := openTable(t, brokers, func(c Change) { mu.Lock(); seen = append(seen, c); mu.Unlock() })
	ctx := context.Background()
	own.cl.PauseFetchTopics(own.cfg.Topic) // the reader lags behind both writes
	if err := other.Put(ctx, "k", []byte("claim")); err != nil {
		t.Fatal(err)
	}
	if err := own.Put(ctx, "k", []byte("late")); err != nil {
		t.Fatal(err)
	}
	own.cl.ResumeFetchTopics(own.cfg.Topic)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := append([]Change(nil), seen...)
		mu.Unlock()
		if len(got) == 2 {
			if string(got[0].Value) != "claim" || !got[0].Superseded || string(got[1].Value) != "late" || got[1].Superseded {
				t.Fatalf("watcher saw %+v, want the other's claim (superseded), then the own write", got)
			}
			break
		}
		if len(got) > 2 || time.Now().After(deadline) {
			t.Fatalf("watcher saw %d changes %+v, want 2: the other's claim, superseded by the own write, and that write", len(got), got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v, _ := own.Get("k"); string(v) != "late" {
		t.Fatalf("table holds %q, want the own later write", v)
	}
}

// TestTableCountsByTag: Count follows every write, overwrite and delete,
// on the writer (its own writes) and on a reader (what it read).
func TestTableCountsByTag(t *testing.T) {
	brokers := newCluster(t)
	tag := func(v []byte) uint8 {
		if string(v) == "on" {
			return 1
		}
		return 2
	}
	open := func() *Table {
		tb, err := Open(TableConfig{Brokers: brokers, Topic: "_ferry_test", Partitions: 4, ReplicationFactor: 1, Tag: tag}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tb.Close)
		<-tb.Loaded()
		return tb
	}
	w, r := open(), open()
	ctx := context.Background()
	for i := range 10 {
		if err := w.Put(ctx, fmt.Sprintf("k%d", i), []byte("on")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if err := w.Put(ctx, fmt.Sprintf("k%d", i), []byte("off")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Delete(ctx, "k9"); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil { // the writer reads its own records back too
		t.Fatal(err)
	}
	for name, tb := range map[string]*Table{"writer": w, "reader": r} {
		if on, off := tb.Count(1), tb.Count(2); on != 5 || off != 3 {
			t.Errorf("%s: Count(on) %d, Count(off) %d, want 5 and 3", name, on, off)
		}
	}
}

// TestSyncsShareListings: 200 Syncs at once (a storm of CONNECTs) ask Kafka
// for the end offsets a few times, not 200, and each still reads what was
// written before it: a key written just before its Sync, by another table,
// is there once the Sync returns.
func TestSyncsShareListings(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	w, r := openTable(t, brokers, nil), openTable(t, brokers, nil)
	var listings atomic.Int64
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		listings.Add(1)
		time.Sleep(2 * time.Millisecond) // a round trip, for the others to arrive meanwhile
		return nil, nil, false
	})
	// The reader lags: a Sync that took end offsets listed before its key
	// was written would return before the key is read.
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(3 * time.Millisecond)
		return nil, nil, false
	})
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, want := fmt.Sprintf("storm-%d", i), fmt.Sprintf("v%d", i)
			if err := w.Put(ctx, key, []byte(want)); err != nil {
				errs <- err
				return
			}
			if err := r.Sync(ctx); err != nil {
				errs <- err
				return
			}
			if got, ok := r.Get(key); !ok || string(got) != want {
				errs <- fmt.Errorf("%s after Sync: %q (present %v), want %q", key, got, ok, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := listings.Load(); got > n/4 {
		t.Errorf("%d Syncs at once listed the end offsets %d times: each asked on its own", n, got)
	} else {
		t.Logf("%d Syncs at once: %d listings", n, got)
	}
}

// TestSyncJoinsOnlyALaterListing: a Sync called while a listing is on its
// way waits for the next one, which starts after the call: the running
// one may have been answered before the caller's own write landed.
func TestSyncJoinsOnlyALaterListing(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tb := openTable(t, c.ListenAddrs(), nil)
	hold := make(chan struct{})
	var listings atomic.Int64
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if listings.Add(1) == 1 {
			<-hold
		}
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- tb.Sync(ctx) }()
	waitUntil(t, "the first listing on its way", func() bool { return listings.Load() == 1 })
	second := make(chan error, 1)
	go func() { second <- tb.Sync(ctx) }()
	waitUntil(t, "the second Sync waiting", func() bool {
		tb.lmu.Lock()
		defer tb.lmu.Unlock()
		return tb.lnext != nil
	})
	close(hold)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	// At least 2: one that started after the second Sync was called. (A
	// third can come from the table's own consumer, which lists offsets
	// too: a fresh-clone run under load had 3.)
	if got := listings.Load(); got < 2 {
		t.Fatalf("%d listings: the Sync called during the first listing took its answer", got)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// The table's writes are lz4 batches of 64 KiB-block frames: Kafka's
// snappy reader allocates per batch when it checks one, and a frame's
// reader allocates its block size (see Open).
func TestTableWritesLZ4Batches(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	// The frames the table sends: a v2 batch's records start 61 bytes in.
	var frames sync.Map // the block size of each frame, 0 for a checksum -> true
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				if b := rp.Records; len(b) > 61 && b[22]&7 == 3 {
					size, sum, _ := lz4frame.Descriptor(b[61:])
					if sum {
						size = 0
					}
					frames.Store(size, true)
				}
			}
		}
		return nil, nil, false
	})
	a := openTable(t, brokers, nil)
	// A value that compresses (franz-go sends a batch that does not
	// uncompressed).
	v := []byte(`{"subscriptions":[` + strings.Repeat(`{"filter":"a/b/c","qos":1},`, 40) + `{}]}`)
	if err := a.Put(context.Background(), "k", v); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("_ferry_test"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("the table's record not read within 10 s")
		}
		for _, r := range fs.Records() {
			if string(r.Key) != "k" {
				continue
			}
			if c := r.Attrs.CompressionType(); c != 3 {
				t.Fatalf("the table's record came in a batch of compression type %d, want 3 (lz4)", c)
			}
			n := 0
			frames.Range(func(size, _ any) bool {
				if size != lz4frame.BlockSize {
					t.Errorf("an lz4 frame of %d-byte blocks (0: with a content checksum), want 64 KiB", size)
				}
				n++
				return true
			})
			if n == 0 {
				t.Error("no lz4 frame seen in the table's produce requests")
			}
			return
		}
	}
}
