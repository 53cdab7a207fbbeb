package state

import (
	"slices"
	"strings"
	"time"
)

// Page returns one page of the table's keys in byte order: at most limit
// keys greater than after that start with prefix and whose row stands for
// a value whose tag (TableConfig.Tag) keep accepts (keep nil: any), and
// whether more follow. It compares keys only, never decoding a value nor
// copying the table. The next page starts after the last key.
//
// The first Page of a table passes over every key under the table's lock
// (O(keys)) and has the keys sorted, in the background, into an index: a
// sorted copy of the keys (16 bytes a key, shared strings) plus the keys
// added since, sorted again once they are a tenth of it. The pages after
// that look their keys up in it (O(log keys + page + added)).
func (t *Table) Page(prefix, after string, limit int, keep func(tag uint8) bool) (keys []string, more bool) {
	if limit <= 0 {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index == nil {
		t.index = &keyIndex{added: make(map[string]struct{})}
		t.reindexLocked()
		return t.scan(prefix, after, limit, keep)
	}
	x := t.index
	if !x.built {
		return t.scan(prefix, after, limit, keep)
	}
	if len(x.added) > max(1000, len(x.sorted)/10) || len(x.added) > 0 && time.Since(x.at) > time.Minute {
		t.reindexLocked()
	}
	page := make([]string, 0, limit+1)
	ok := func(k string) bool {
		r, found := t.rows[k]
		return found && r.present() && (keep == nil || keep(r.tag))
	}
	start := max(after, prefix)
	i, _ := slices.BinarySearch(x.sorted, start)
	for ; i < len(x.sorted) && len(page) <= limit; i++ {
		k := x.sorted[i]
		if !strings.HasPrefix(k, prefix) {
			break // the keys with the prefix are together, and passed
		}
		if k > after && ok(k) {
			page = append(page, k)
		}
	}
	// The keys added since the index was sorted: each that belongs
	// here, merged in (a key deleted and added again is in both).
	var late []string
	for k := range x.added {
		if k > after && strings.HasPrefix(k, prefix) && ok(k) && (len(page) <= limit || k < page[limit]) {
			late = append(late, k)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		page = slices.Compact(mergeSorted(page, late))
	}
	if len(page) > limit {
		return page[:limit], true
	}
	return page, false
}

// scan is Page's pass over every key (t.mu held): each rejected by a
// comparison with the page's last key once the page is full
// (O(keys + page x log page)).
func (t *Table) scan(prefix, after string, limit int, keep func(tag uint8) bool) ([]string, bool) {
	page := make([]string, 0, limit+1) // sorted; one past limit says more
	for k, r := range t.rows {
		if k <= after || !r.present() || !strings.HasPrefix(k, prefix) {
			continue
		}
		if len(page) == limit+1 && k >= page[limit] {
			continue
		}
		if keep != nil && !keep(r.tag) {
			continue
		}
		i, _ := slices.BinarySearch(page, k)
		if len(page) == limit+1 {
			page = page[:limit]
		}
		page = slices.Insert(page, i, k)
	}
	if len(page) > limit {
		return page[:limit], true
	}
	return page, false
}

// keyIndex is the table's keys in order, for Page (guarded by t.mu).
type keyIndex struct {
	sorted  []string            // the keys when they were copied (some deleted since)
	added   map[string]struct{} // keys added since
	at      time.Time           // when they were copied
	built   bool                // sorted is ready
	sorting bool                // a sort runs: since collects the keys added
	since   map[string]struct{} // keys added since the copy being sorted
}

func (x *keyIndex) add(k string) {
	x.added[k] = struct{}{}
	if x.sorting {
		x.since[k] = struct{}{}
	}
}

// reindexLocked copies the keys (t.mu held) and sorts them in the
// background; then they are the index, with the keys added meanwhile.
// Until then Page uses the index as it was.
func (t *Table) reindexLocked() {
	x := t.index
	if x.sorting {
		return
	}
	keys := make([]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	x.sorting, x.since = true, make(map[string]struct{})
	at := time.Now()
	go func() {
		slices.Sort(keys)
		t.mu.Lock()
		defer t.mu.Unlock()
		x.sorted, x.added, x.at, x.built = keys, x.since, at, true
		x.sorting, x.since = false, nil
	}()
}

// mergeSorted merges two sorted lists.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0] <= b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}
