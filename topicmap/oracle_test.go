package topicmap

import (
	"slices"
	"strings"
)

// linear is the straightforward matcher used as the test oracle and the benchmark baseline:
// a plain loop over every rule with MatchFilter, keeping the most specific match.
type linear struct {
	exclude []string
	filters []string
	ranks   [][]int
}

func newLinear(exclude, filters []string) *linear {
	l := &linear{exclude: exclude, filters: filters}
	for _, f := range filters {
		l.ranks = append(l.ranks, filterRanks(f))
	}
	return l
}

// filterRanks gives a filter's specificity per level: literal 3, '+' 2, end of filter 1,
// '#' 0. Of two filters matching the same topic, the lexicographically larger one wins.
func filterRanks(f string) []int {
	var r []int
	for _, l := range strings.Split(f, "/") {
		switch l {
		case "#":
			return append(r, 0)
		case "+":
			r = append(r, 2)
		default:
			r = append(r, 3)
		}
	}
	return append(r, 1)
}

func (l *linear) match(topic string) (int, bool) {
	for _, f := range l.exclude {
		if MatchFilter(f, topic) {
			return DefaultRule, false
		}
	}
	best := DefaultRule
	for i, f := range l.filters {
		if MatchFilter(f, topic) && (best < 0 || slices.Compare(l.ranks[i], l.ranks[best]) > 0) {
			best = i
		}
	}
	return best, true
}
