package topicmap

import (
	"strings"
	"unicode/utf8"
)

// ValidFilter reports whether f is a valid MQTT topic filter for a rule: non-empty, valid
// UTF-8, no U+0000, '+' and '#' only as a whole level, '#' only as the last level, and not a
// shared subscription ("$share/…"). Stricter than mochi-mqtt's IsValidFilter, which accepts
// "a+b". The error is a *TopicError.
func ValidFilter(f string) error {
	if reason := filterReason(f); reason != "" {
		return &TopicError{Topic: f, Reason: reason}
	}
	return nil
}

func filterReason(f string) string {
	switch {
	case f == "":
		return "empty filter"
	case len(f) > MaxMQTTTopicLen:
		return "filter longer than 65535 bytes"
	case !utf8.ValidString(f):
		return "filter is not valid UTF-8"
	case strings.IndexByte(f, 0) >= 0:
		return "U+0000 in a filter"
	case f == "$share" || strings.HasPrefix(f, "$share/"):
		return "shared subscriptions ($share/…) cannot be rules"
	}
	rest := f
	for {
		level, after, more := strings.Cut(rest, "/")
		if strings.ContainsAny(level, "+#") {
			if level != "+" && level != "#" {
				return "'+' and '#' must occupy a whole level"
			}
			if level == "#" && more {
				return "'#' must be the last level"
			}
		}
		if !more {
			return ""
		}
		rest = after
	}
}

func hasWildcard(f string) bool { return strings.ContainsAny(f, "+#") }

// MatchFilter reports whether topic matches filter under MQTT rules: '+' matches one level
// (possibly empty), '#' matches any number of trailing levels including none ("a/#" matches
// "a"), and filters starting with a wildcard do not match topics starting with '$'. It is the
// straightforward one-pair matcher; Map.Match does the same for many filters at once.
func MatchFilter(filter, topic string) bool {
	if topic != "" && topic[0] == '$' && filter != "" && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			return frest == "#"
		case !fmore:
			return false
		}
		filter, topic = frest, trest
	}
}

// node is a trie node for wildcard filters. Children are keyed by literal level; '+' has its
// own child; '#' is always a leaf, so only its rule index is kept.
type node struct {
	children map[string]*node
	plus     *node
	rule     int32 // rule whose filter ends at this node, or -1
	hash     int32 // rule whose filter is this node's path + "/#", or -1
}

func newNode() *node { return &node{rule: -1, hash: -1} }

// insert adds filter with rule index r; it reports the index already there, if any.
func (n *node) insert(filter string, r int32) (prev int32, dup bool) {
	rest := filter
	for {
		level, after, more := strings.Cut(rest, "/")
		switch {
		case level == "#":
			if n.hash >= 0 {
				return n.hash, true
			}
			n.hash = r
			return -1, false
		case level == "+":
			if n.plus == nil {
				n.plus = newNode()
			}
			n = n.plus
		default:
			if n.children == nil {
				n.children = make(map[string]*node)
			}
			c := n.children[level]
			if c == nil {
				c = newNode()
				n.children[level] = c
			}
			n = c
		}
		if !more {
			if n.rule >= 0 {
				return n.rule, true
			}
			n.rule = r
			return -1, false
		}
		rest = after
	}
}

// levelAt returns the level of t starting at pos and the start of the next level;
// next == len(t)+1 once the last level has been consumed.
func levelAt(t string, pos int) (level string, next int) {
	i := strings.IndexByte(t[pos:], '/')
	if i < 0 {
		return t[pos:], len(t) + 1
	}
	return t[pos : pos+i], pos + i + 1
}

// match returns the most specific rule matching t from position pos, or -1. It explores
// children in precedence order — literal, '+', then (topic exhausted) the filter ending here,
// then '#' — so the first match found is the most specific (see the package doc). It does
// not allocate.
func (n *node) match(t string, pos int, root bool) int32 {
	if pos > len(t) {
		if n.rule >= 0 {
			return n.rule
		}
		return n.hash
	}
	level, next := levelAt(t, pos)
	if c := n.children[level]; c != nil {
		if r := c.match(t, next, false); r >= 0 {
			return r
		}
	}
	if root && t != "" && t[0] == '$' { // [MQTT-4.7.2-1]
		return -1
	}
	if n.plus != nil {
		if r := n.plus.match(t, next, false); r >= 0 {
			return r
		}
	}
	return n.hash
}
