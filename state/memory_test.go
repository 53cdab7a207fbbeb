package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

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
	defer cl.Close()
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
	grew := int64(heap()) - int64(before)
	per := float64(grew) / keys
	t.Logf("%d keys of %d B values (each written %d times): table heap %.0f B per key", keys, size, versions, per)
	if per > 2*size {
		t.Fatalf("the table holds %.0f B per key for %d B values: it keeps more than each key's latest value", per, size)
	}
	runtime.KeepAlive(tb)
}
