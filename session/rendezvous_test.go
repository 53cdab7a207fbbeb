package session

import (
	"fmt"
	"testing"
)

// TestChooseInstanceRendezvous: every caller picks the same instance for a
// key whatever the order of the ids; keys spread over the instances; when
// one instance leaves, only its keys move.
func TestChooseInstanceRendezvous(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	count := map[string]int{}
	for i := range 4000 {
		k := fmt.Sprintf("client-%d", i)
		got := ChooseInstance(k, ids)
		if rev := ChooseInstance(k, []string{"d", "c", "b", "a"}); rev != got {
			t.Fatalf("%s: %s or %s depending on the order of ids", k, got, rev)
		}
		count[got]++
		if after := ChooseInstance(k, []string{"a", "b", "d"}); got != "c" && after != got {
			t.Fatalf("%s moved from %s to %s when c left", k, got, after)
		}
	}
	for _, id := range ids {
		if count[id] < 800 || count[id] > 1200 {
			t.Fatalf("keys per instance %v: uneven", count)
		}
	}
}
