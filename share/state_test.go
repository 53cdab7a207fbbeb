package share

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func testGroup() *group {
	m := &Manager{d: Deps{Metrics: NewMetrics()}}
	g := &group{key: "$share/g/a/+", wake: make(chan struct{}, 1), m: m,
		delivered: m.d.Metrics.Delivered.WithLabelValues("$share/g/a/+"), redelivered: m.d.Metrics.Redelivered.WithLabelValues("$share/g/a/+"),
		lag: m.d.Metrics.Lag.WithLabelValues("$share/g/a/+")}
	g.state.init()
	return g
}

// The commit of a partition stops at its lowest unacknowledged offset,
// moves on when that is acknowledged, and is the next to hand out when
// nothing is owed.
func TestCommitStopsAtWhatIsOwed(t *testing.T) {
	g := testGroup()
	g.assign(map[string][]int32{"a_x": {0}})
	p := g.parts[tp{"a_x", 0}]
	recs := make([]*kgo.Record, 5)
	ds := make([]*delivery, 5)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "a_x", Partition: 0, Offset: int64(10 + i)}
		ds[i] = &delivery{g: g, rec: recs[i], part: p}
		g.handedOut(p, recs[i], i != 2) // offset 12 was QoS 0: owed nothing
		if i != 2 {
			g.owedBy("m", ds[i])
		}
	}
	at := func() int64 { return g.committable()["a_x"][0].Offset }
	if got := at(); got != 10 {
		t.Fatalf("commit at %d, want 10 (nothing acknowledged)", got)
	}
	g.acked(ds[1])
	if got := at(); got != 10 {
		t.Fatalf("commit at %d after 11's ack, want 10 (10 still owed)", got)
	}
	g.acked(ds[0])
	if got := at(); got != 13 {
		t.Fatalf("commit at %d after 10's ack, want 13", got)
	}
	g.committed(g.committable())
	if len(g.committable()) != 0 {
		t.Fatal("a commit that did not move was offered again")
	}
	g.handBack(ds[3]) // its member went: still owed, delivered again
	if back := g.takeBack(); len(back) != 1 || back[0] != ds[3] || at2(g) != -1 {
		t.Fatalf("handed back %v", back)
	}
	g.acked(ds[3])
	g.acked(ds[4])
	if got := at(); got != 15 {
		t.Fatalf("commit at %d with nothing owed, want 15", got)
	}
	if g.load["m"] != 0 {
		t.Fatalf("member load %d after every acknowledgement", g.load["m"])
	}
}

// at2 is the commit offered for a_x/0 (-1: none).
func at2(g *group) int64 {
	if eo, ok := g.committable()["a_x"][0]; ok {
		return eo.Offset
	}
	return -1
}

// A revoked partition's deliveries are no longer the group's: their
// acknowledgements and hand-backs change nothing.
func TestRevokedPartitionForgotten(t *testing.T) {
	g := testGroup()
	g.assign(map[string][]int32{"a_x": {0, 1}})
	p := g.parts[tp{"a_x", 1}]
	rec := &kgo.Record{Topic: "a_x", Partition: 1, Offset: 7}
	d := &delivery{g: g, rec: rec, part: p}
	g.handedOut(p, rec, true)
	g.owedBy("m", d)
	g.revoke(map[string][]int32{"a_x": {1}})
	g.handBack(d)
	if len(g.takeBack()) != 0 {
		t.Fatal("a revoked partition's delivery was handed back")
	}
	g.assign(map[string][]int32{"a_x": {1}}) // assigned again: a new state
	g.acked(d)
	if _, ok := g.committable()["a_x"][1]; ok {
		t.Fatal("a partition assigned again offers a commit from its old state")
	}
}

// Members are offered fewest owed first (ties in turn), never past the
// limit, nor one denied, gone or whose queue was full.
func TestLeastLoaded(t *testing.T) {
	g := testGroup()
	g.members = []string{"a", "b", "c"}
	g.load = map[string]int{"a": 3, "b": 1, "c": 2}
	if got, ok := g.leastLoaded(3, nil, nil); !ok || got != "b" {
		t.Fatalf("least loaded %q, want b", got)
	}
	if got, ok := g.leastLoaded(3, map[string]bool{"b": true}, nil); !ok || got != "c" {
		t.Fatalf("least loaded %q with b denied, want c (a at the limit)", got)
	}
	if got, ok := g.leastLoaded(3, nil, map[string]bool{"b": true, "c": true}); ok {
		t.Fatalf("least loaded %q with b and c gone, want none (a at the limit)", got)
	}
	g.full("b")
	if got, ok := g.leastLoaded(3, nil, nil); !ok || got != "c" {
		t.Fatalf("least loaded %q, want c (b's queue was full)", got)
	}
	g.load = map[string]int{}
	g.paused = map[string]time.Time{}
	seen := map[string]int{}
	for range 30 {
		id, _ := g.leastLoaded(3, nil, nil)
		seen[id]++
	}
	if seen["a"] != 10 || seen["b"] != 10 || seen["c"] != 10 {
		t.Fatalf("ties picked %v, want each in turn", seen)
	}
}

func TestSplitShared(t *testing.T) {
	for f, want := range map[string]bool{"$share/g/a/#": true, "$share/g/": false, "$share//a": false, "a/b": false, "$share/g": false} {
		if _, _, ok := splitShared(f); ok != want {
			t.Errorf("splitShared(%q) = %v, want %v", f, ok, want)
		}
	}
	if GroupName("g", "a/#") == GroupName("g", "a/+") || GroupName("g", "a/#") != GroupName("g", "a/#") {
		t.Error("group names must differ per filter and be stable")
	}
}
