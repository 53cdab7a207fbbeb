package state

import (
	"slices"
	"strings"
)

// Page returns one page of the table's keys in byte order: at most limit
// keys greater than after that start with prefix and whose row stands for
// a value whose tag (TableConfig.Tag) keep accepts (keep nil: any), and
// whether more follow. It compares keys only, never decoding a value nor
// copying the table: one pass over the keys under the table's lock, each
// rejected by a comparison with the page's last key once the page is full
// (O(keys + page x log page)). The next page starts after the last key.
func (t *Table) Page(prefix, after string, limit int, keep func(tag uint8) bool) (keys []string, more bool) {
	if limit <= 0 {
		return nil, false
	}
	page := make([]string, 0, limit+1) // sorted; one past limit says more
	t.mu.Lock()
	defer t.mu.Unlock()
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
