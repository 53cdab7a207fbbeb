package topicmap

import (
	"fmt"
	"strconv"
	"strings"
)

// Placeholder values of seg.v other than level/group numbers (which are >= 1).
const (
	varLiteral = 0
	varTopic   = -1 // {topic}
	varDefault = -2 // {default}
)

type seg struct {
	lit string // literal text when v == varLiteral
	v   int
}

// template is a parsed topic, key, header or reverse template (syntax in the package doc).
type template struct {
	raw   string
	segs  []seg
	fixed bool   // no placeholders
	lit   string // the whole text when fixed
	maxN  int    // highest {N} used, 0 if none
}

// parseTemplate parses s; the error is a reason string for a RuleError.
func parseTemplate(s string) (*template, string) {
	t := &template{raw: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.segs = append(t.segs, seg{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '{':
			if i+1 < len(s) && s[i+1] == '{' {
				lit.WriteByte('{')
				i++
				continue
			}
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return nil, fmt.Sprintf("unclosed '{' at offset %d", i)
			}
			name := s[i+1 : i+1+end]
			var v int
			switch name {
			case "topic":
				v = varTopic
			case "default":
				v = varDefault
			default:
				n, err := strconv.Atoi(name)
				if err != nil || n < 1 || n > MaxMQTTTopicLen || name[0] == '+' {
					return nil, fmt.Sprintf("unknown placeholder {%s} (want {1}..{n}, {topic} or {default}; '{{' for a literal brace)", name)
				}
				v = n
				t.maxN = max(t.maxN, n)
			}
			flush()
			t.segs = append(t.segs, seg{v: v})
			i += end + 1
		case '}':
			if i+1 < len(s) && s[i+1] == '}' {
				lit.WriteByte('}')
				i++
				continue
			}
			return nil, fmt.Sprintf("unmatched '}' at offset %d (write '}}' for a literal brace)", i)
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	if len(t.segs) == 0 || len(t.segs) == 1 && t.segs[0].v == varLiteral {
		t.fixed = true
		if len(t.segs) == 1 {
			t.lit = t.segs[0].lit
		}
	}
	return t, ""
}

// uses reports whether the template uses placeholder v.
func (t *template) uses(v int) bool {
	for _, s := range t.segs {
		if s.v == v {
			return true
		}
	}
	return false
}

// literals returns the concatenated literal text (for character checks).
func (t *template) literals() string {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteString(s.lit)
	}
	return b.String()
}

// resolver supplies placeholder values while expanding a template.
type resolver interface {
	value(v int) (string, string) // value, or "" and a failure reason
}

func (t *template) expand(dst []byte, r resolver) ([]byte, string) {
	for _, s := range t.segs {
		if s.v == varLiteral {
			dst = append(dst, s.lit...)
			continue
		}
		val, reason := r.value(s.v)
		if reason != "" {
			return dst, reason
		}
		dst = append(dst, val...)
	}
	return dst, ""
}

// mqttLevel returns level n (1-based) of topic t.
func mqttLevel(t string, n int) (string, bool) {
	pos := 0
	for i := 1; pos <= len(t); i++ {
		level, next := levelAt(t, pos)
		if i == n {
			return level, true
		}
		pos = next
	}
	return "", false
}

// forwardResolver resolves placeholders of forward templates for an MQTT topic.
type forwardResolver struct{ topic string }

func (f forwardResolver) value(v int) (string, string) {
	switch v {
	case varTopic:
		return f.topic, ""
	case varDefault:
		name, err := encode(f.topic)
		if err != nil {
			return "", err.(*TopicError).Reason
		}
		return name, ""
	}
	level, ok := mqttLevel(f.topic, v)
	if !ok {
		return "", fmt.Sprintf("topic has no level %d", v)
	}
	return level, ""
}

// reverseResolver resolves placeholders of reverse templates for a Kafka topic.
type reverseResolver struct {
	kafka  string
	groups []string // regex submatches; groups[0] is the whole match
}

func (r reverseResolver) value(v int) (string, string) {
	switch v {
	case varTopic:
		return r.kafka, ""
	case varDefault:
		t, err := DecodeTopic(r.kafka)
		if err != nil {
			return "", err.(*TopicError).Reason
		}
		return t, ""
	}
	if v < len(r.groups) {
		return r.groups[v], ""
	}
	return "", fmt.Sprintf("no capture group %d", v)
}
