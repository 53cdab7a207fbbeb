package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// tableOf is a table holding rows for keys (tag: tagOf), read from no
// Kafka: what Page scans.
func tableOf(keys []string, tagOf func(i int) uint8) *Table {
	t := &Table{rows: make(map[string]row, len(keys)), counts: make(map[uint8]int)}
	v := []byte(`{}`)
	for i, k := range keys {
		t.rows[k] = row{val: &v, offset: int64(i), tag: tagOf(i)}
	}
	return t
}

// TestPageWalksTheKeysInOrder: pages of any size, with a prefix and a tag
// filter, list every matching key once, in order, and say when none follow;
// a tombstone awaiting read-back is not listed. So on the first pass (a
// scan of the keys), once the keys are indexed, and after keys were added
// and removed since the index was sorted.
func TestPageWalksTheKeysInOrder(t *testing.T) {
	var keys []string
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("dev/%04d", (i*7919)%1000), fmt.Sprintf("other/%d", i))
	}
	tb := tableOf(keys, func(i int) uint8 { return uint8(i % 3) })
	tb.rows["dev/gone"] = row{offset: 1, tag: 1} // a tombstone not yet read back
	keep := func(tag uint8) bool { return tag != 0 }
	check := func(phase string) {
		t.Helper()
		tb.mu.Lock()
		var want []string
		for k, r := range tb.rows {
			if len(k) > 4 && k[:4] == "dev/" && r.present() && keep(r.tag) {
				want = append(want, k)
			}
		}
		tb.mu.Unlock()
		slices.Sort(want)
		for _, limit := range []int{1, 7, 100, 1000, 5000} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(want)+1 {
					t.Fatalf("%s, limit %d: more pages than keys", phase, limit)
				}
				page, more := tb.Page("dev/", after, limit, keep)
				if len(page) > limit {
					t.Fatalf("%s, limit %d: a page of %d", phase, limit, len(page))
				}
				got = append(got, page...)
				if !more {
					break
				}
				after = page[len(page)-1]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s, limit %d: listed %d keys, want %d (first %v, want %v)", phase, limit, len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
			}
		}
	}
	check("scan")
	deadline := time.Now().Add(10 * time.Second)
	for {
		tb.mu.Lock()
		built := tb.index.built
		tb.mu.Unlock()
		if built {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keys were not indexed within 10 s")
		}
		time.Sleep(time.Millisecond) // polling the background sort
	}
	check("indexed")
	v := []byte(`{}`)
	tb.mu.Lock()
	for i := range 300 {
		tb.set(fmt.Sprintf("dev/%04d-late", i*3), row{val: &v, tag: uint8(1 + i%2)}, false)
		tb.remove(fmt.Sprintf("dev/%04d", i*2))
	}
	tb.set("dev/0001", row{val: &v, tag: 1}, false) // there already: a value again
	tb.mu.Unlock()
	check("added and removed since")
	// Keys added while the keys are sorted again are not lost.
	tb.mu.Lock()
	tb.reindexLocked() // its sort waits for the lock
	for i := range 50 {
		tb.set(fmt.Sprintf("dev/%04d-during", i), row{val: &v, tag: 1}, false)
	}
	tb.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; {
		tb.mu.Lock()
		sorting := tb.index.sorting
		tb.mu.Unlock()
		if !sorting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keys were not sorted again within 10 s")
		}
		time.Sleep(time.Millisecond) // polling the background sort
	}
	check("added while sorted again")
}

// BenchmarkPage100k lists 100,000 sessions' keys page by page (100 a page,
// the admin API's default), reporting the time of one page (mean, p99,
// worst): the admin API's promise is under 50 ms.
func BenchmarkPage100k(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("device-%06d", (i*7919)%100_000)
	}
	tb := tableOf(keys, func(i int) uint8 { return uint8(1 + i%2) })
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		after := ""
		for {
			start := time.Now()
			page, more := tb.Page("", after, 100, nil)
			took = append(took, time.Since(start))
			if !more {
				break
			}
			after = page[len(page)-1]
		}
	}
	b.StopTimer()
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	b.ReportMetric(ms(b.Elapsed())/float64(len(took)), "ms/page")
	b.ReportMetric(ms(took[len(took)*99/100]), "p99-ms/page")
	b.ReportMetric(ms(took[len(took)-1]), "worst-ms/page")
	b.ReportMetric(0, "ns/op")
}
