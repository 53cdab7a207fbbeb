package topicmap

import (
	"fmt"
	"testing"
)

// benchRules builds n mixed rules (2 exact : 3 wildcard) shaped like real deployments, and a
// set of topics that hit exact rules, wildcard rules, and no rule (default).
func benchRules(n int) ([]ForwardRule, []string) {
	rules := make([]ForwardRule, 0, n)
	for i := 0; len(rules) < n; i++ {
		k := i / 5
		var r ForwardRule
		switch i % 5 {
		case 0:
			r = ForwardRule{Filter: fmt.Sprintf("devices/dev-%05d/telemetry", k), Topic: "device-telemetry", Key: "fixed"}
		case 1:
			r = ForwardRule{Filter: fmt.Sprintf("fleet/truck-%05d/gps", k), Topic: "fleet-gps", Key: "fixed"}
		case 2:
			r = ForwardRule{Filter: fmt.Sprintf("site%04d/+/line%d/#", k, k%7), Topic: "site-lines", Key: "fixed"}
		case 3:
			r = ForwardRule{Filter: fmt.Sprintf("sensors/type%04d/+/temperature", k), Topic: "sensor-temps", Key: "fixed"}
		case 4:
			r = ForwardRule{Filter: fmt.Sprintf("+/region%04d/status", k), Topic: "region-status", Key: "fixed"}
		}
		rules = append(rules, r)
	}
	groups := max(n/5, 1)
	var topics []string
	for j := 0; len(topics) < 1024; j++ {
		k := (j * 7919) % groups
		switch j % 6 {
		case 0:
			topics = append(topics, fmt.Sprintf("devices/dev-%05d/telemetry", k))
		case 1:
			topics = append(topics, fmt.Sprintf("site%04d/hall%d/line%d/machine%d/temp", k, j%4, k%7, j%13))
		case 2:
			topics = append(topics, fmt.Sprintf("sensors/type%04d/dev%d/temperature", k, j))
		case 3:
			topics = append(topics, fmt.Sprintf("gw%d/region%04d/status", j%50, k))
		case 4:
			topics = append(topics, fmt.Sprintf("home/room%d/light/state", j%20)) // default rule
		case 5:
			topics = append(topics, fmt.Sprintf("fleet/truck-%05d/gps", k))
		}
	}
	return rules, topics
}

var benchSizes = []int{100, 10000}

// BenchmarkMatch measures Map.Match: exclude check, exact map, wildcard trie.
func BenchmarkMatch(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			rules, topics := benchRules(n)
			m, err := New(Config{Forward: rules, Exclude: []string{"$SYS/#"}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			sum, i := 0, 0
			for b.Loop() {
				r, _ := m.Match(topics[i&1023])
				sum += r
				i++
			}
			_ = sum
		})
	}
}

// BenchmarkLinear is the baseline: a plain loop over the same rules with MatchFilter.
func BenchmarkLinear(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			rules, topics := benchRules(n)
			filters := make([]string, len(rules))
			for i, r := range rules {
				filters[i] = r.Filter
			}
			l := newLinear([]string{"$SYS/#"}, filters)
			b.ReportAllocs()
			sum, i := 0, 0
			for b.Loop() {
				r, _ := l.match(topics[i&1023])
				sum += r
				i++
			}
			_ = sum
		})
	}
}

// BenchmarkForward measures the full Forward path (validation + Match + route) on rules with
// fixed routes (no allocation) and on the default rule (allocates the name and the key).
func BenchmarkForward(b *testing.B) {
	rules, _ := benchRules(10000)
	m, err := New(Config{Forward: rules, Exclude: []string{"$SYS/#"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, topic string }{
		{"fixed", "site0042/hall1/line0/machine3/temp"},
		{"default", "home/room7/light/state"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Forward(c.topic); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBenchRulesAgree checks the benchmark's two matchers agree on every benchmark topic.
func TestBenchRulesAgree(t *testing.T) {
	rules, topics := benchRules(10000)
	m, err := New(Config{Forward: rules, Exclude: []string{"$SYS/#"}})
	if err != nil {
		t.Fatal(err)
	}
	filters := make([]string, len(rules))
	for i, r := range rules {
		filters[i] = r.Filter
	}
	l := newLinear([]string{"$SYS/#"}, filters)
	hits := 0
	for _, topic := range topics {
		got, gok := m.Match(topic)
		want, wok := l.match(topic)
		if got != want || gok != wok {
			t.Fatalf("Match(%q) = %d, %v; linear %d, %v", topic, got, gok, want, wok)
		}
		if got >= 0 {
			hits++
		}
	}
	if hits < len(topics)/2 {
		t.Fatalf("only %d of %d benchmark topics hit a rule", hits, len(topics))
	}
}

func TestForwardFixedNoAlloc(t *testing.T) {
	rules, _ := benchRules(1000)
	m, err := New(Config{Forward: rules})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := m.Forward("sensors/type0042/dev9/temperature"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Forward on a fixed route: %v allocs, want 0", allocs)
	}
}
