package topicmap

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry the detail.
var (
	// ErrExcluded: the topic matches an exclude filter and is never bridged (either way).
	ErrExcluded = errors.New("topicmap: topic excluded")
	// ErrUnmappable: the topic cannot be mapped; every *TopicError unwraps to it.
	ErrUnmappable = errors.New("topicmap: topic cannot be mapped")
	// ErrInvalidRule: a rule failed validation; every *RuleError unwraps to it.
	ErrInvalidRule = errors.New("topicmap: invalid rule")
)

// TopicError reports a topic (MQTT or Kafka) that cannot be mapped and why.
// It is never produced by silently renaming: the message is rejected instead.
type TopicError struct {
	Topic  string // the offending topic, as given
	Reason string // human-readable reason
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("topicmap: topic %q: %s", e.Topic, e.Reason)
}

// Unwrap returns ErrUnmappable.
func (e *TopicError) Unwrap() error { return ErrUnmappable }

// RuleError reports a configuration rule that failed validation in New.
type RuleError struct {
	Kind   string // "forward", "exclude" or "reverse"
	Index  int    // index of the rule in its Config slice
	Field  string // "filter", "topic", "key", "headers[name]", "kafka", "mqtt", "qos"
	Text   string // the offending text
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("topicmap: %s rule %d: %s %q: %s", e.Kind, e.Index, e.Field, e.Text, e.Reason)
}

// Unwrap returns ErrInvalidRule.
func (e *RuleError) Unwrap() error { return ErrInvalidRule }
