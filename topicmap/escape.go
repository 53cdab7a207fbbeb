package topicmap

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// MaxKafkaTopicLen is Kafka's limit on topic name length.
	MaxKafkaTopicLen = 249
	// MaxMQTTTopicLen is MQTT's limit on topic length in bytes (a UTF-8 string's 16-bit length).
	MaxMQTTTopicLen = 65535
	// kafkaInternalPrefix starts Kafka-internal topics (__consumer_offsets, __transaction_state…).
	kafkaInternalPrefix = "__"
	// FerryPrefix starts the topics Ferry keeps its own state in (_ferry_sessions,
	// _ferry_retained, _ferry_instances): no MQTT topic maps to one, and no record of one
	// is published to MQTT.
	FerryPrefix = "_ferry_"
)

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isKafkaChar(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' }

// ValidKafkaTopic reports whether name is a legal Kafka topic name: 1..249 bytes of
// [a-zA-Z0-9._-], and not "." or "..". The error is a *TopicError. It does not reject
// Kafka-internal names (prefix "__"); see IsInternalKafkaTopic.
func ValidKafkaTopic(name string) error {
	if reason := kafkaTopicReason(name); reason != "" {
		return &TopicError{Topic: name, Reason: reason}
	}
	return nil
}

func kafkaTopicReason(name string) string {
	switch {
	case name == "":
		return "empty Kafka topic name"
	case len(name) > MaxKafkaTopicLen:
		return fmt.Sprintf("Kafka topic name is %d chars, the limit is %d", len(name), MaxKafkaTopicLen)
	case name == "." || name == "..":
		return `Kafka forbids the names "." and ".."`
	}
	for i := 0; i < len(name); i++ {
		if !isKafkaChar(name[i]) {
			return fmt.Sprintf("byte %q at offset %d is not allowed in a Kafka topic name (only [a-zA-Z0-9._-])", name[i], i)
		}
	}
	return ""
}

// IsInternalKafkaTopic reports whether name is reserved for Kafka itself (prefix "__").
// Ferry never produces to such a topic.
func IsInternalKafkaTopic(name string) bool { return strings.HasPrefix(name, kafkaInternalPrefix) }

// IsFerryTopic reports whether name is reserved for Ferry's own state (prefix "_ferry_").
func IsFerryTopic(name string) bool { return strings.HasPrefix(name, FerryPrefix) }

// reservedReason says why name may not carry MQTT messages, or "".
func reservedReason(name string) string {
	switch {
	case IsInternalKafkaTopic(name):
		return `Kafka-internal topic (prefix "__")`
	case IsFerryTopic(name):
		return `Ferry's own state topic (prefix "_ferry_")`
	}
	return ""
}

// KafkaMetricName returns name with '.' replaced by '_': Kafka's metric names do not
// distinguish the two, so it refuses to create a topic whose metric name equals an existing
// topic's. Two names collide in Kafka iff their KafkaMetricName is equal.
func KafkaMetricName(name string) string { return strings.ReplaceAll(name, ".", "_") }

// ValidTopicName reports whether t is a valid MQTT topic name for a PUBLISH: non-empty, at
// most 65535 bytes, valid UTF-8, no U+0000 and no wildcard ('+', '#'). The error is a
// *TopicError.
func ValidTopicName(t string) error {
	if reason := topicNameReason(t); reason != "" {
		return &TopicError{Topic: t, Reason: reason}
	}
	return nil
}

func topicNameReason(t string) string {
	if t == "" {
		return "empty MQTT topic"
	}
	if len(t) > MaxMQTTTopicLen {
		return "MQTT topic longer than 65535 bytes"
	}
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '+', '#':
			return "wildcard in an MQTT topic name"
		case 0:
			return "U+0000 in an MQTT topic"
		}
	}
	if !utf8.ValidString(t) {
		return "MQTT topic is not valid UTF-8"
	}
	return ""
}

// encLen is the length of one MQTT byte under the default rule.
func encLen(c byte) int {
	switch {
	case isAlnum(c), c == '/':
		return 1
	case c == '-':
		return 2
	default:
		return 3
	}
}

const hexDigits = "0123456789abcdef"

// EncodeTopic maps an MQTT topic name to a Kafka topic name by the default rule (see the
// package doc): [A-Za-z0-9] literal, '/' -> '_', '-' -> "--", every other byte -> '-' and two
// lowercase hex digits. It is injective and DecodeTopic inverts it. The error is a
// *TopicError: invalid MQTT topic, encoded name longer than 249, or a name starting with "__"
// (MQTT topics starting with "//"), which is reserved for Kafka-internal topics.
func EncodeTopic(mqttTopic string) (string, error) {
	if reason := topicNameReason(mqttTopic); reason != "" {
		return "", &TopicError{Topic: mqttTopic, Reason: reason}
	}
	return encode(mqttTopic)
}

// encode assumes t is a valid MQTT topic name.
func encode(t string) (string, error) {
	n := 0
	for i := 0; i < len(t); i++ {
		n += encLen(t[i])
	}
	if n > MaxKafkaTopicLen {
		return "", &TopicError{Topic: t, Reason: fmt.Sprintf(
			"default rule gives a Kafka name of %d chars, the limit is %d", n, MaxKafkaTopicLen)}
	}
	if strings.HasPrefix(t, "//") {
		return "", &TopicError{Topic: t, Reason: `default rule gives a Kafka name starting with "__", reserved for Kafka-internal topics`}
	}
	if strings.HasPrefix(t, "/ferry/") {
		return "", &TopicError{Topic: t, Reason: `default rule gives a Kafka name starting with "_ferry_", reserved for Ferry's own state topics`}
	}
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case isAlnum(c):
			b.WriteByte(c)
		case c == '/':
			b.WriteByte('_')
		case c == '-':
			b.WriteString("--")
		default:
			b.WriteByte('-')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// DecodeTopic maps a Kafka topic name back to the MQTT topic by the default rule; it is the
// exact inverse of EncodeTopic. Names EncodeTopic never produces are rejected with a
// *TopicError: names containing '.', bad or non-canonical escapes (uppercase hex, or an
// escaped byte that has a shorter form), names starting with "__", and names that decode to
// an invalid MQTT topic (wildcards, U+0000, invalid UTF-8).
func DecodeTopic(kafkaTopic string) (string, error) {
	k := kafkaTopic
	if reason := kafkaTopicReason(k); reason != "" {
		return "", &TopicError{Topic: k, Reason: reason}
	}
	if reason := reservedReason(k); reason != "" {
		return "", &TopicError{Topic: k, Reason: reason}
	}
	b := make([]byte, 0, len(k))
	for i := 0; i < len(k); {
		c := k[i]
		switch {
		case isAlnum(c):
			b = append(b, c)
			i++
		case c == '_':
			b = append(b, '/')
			i++
		case c == '-':
			if i+1 < len(k) && k[i+1] == '-' {
				b = append(b, '-')
				i += 2
				continue
			}
			if i+2 >= len(k) {
				return "", &TopicError{Topic: k, Reason: fmt.Sprintf("truncated escape at offset %d", i)}
			}
			hi, ok1 := unhex(k[i+1])
			lo, ok2 := unhex(k[i+2])
			if !ok1 || !ok2 {
				return "", &TopicError{Topic: k, Reason: fmt.Sprintf(
					"bad escape %q at offset %d (want \"--\" or '-' and two lowercase hex digits)", k[i:i+3], i)}
			}
			v := hi<<4 | lo
			if encLen(v) != 3 {
				return "", &TopicError{Topic: k, Reason: fmt.Sprintf("non-canonical escape %q at offset %d", k[i:i+3], i)}
			}
			b = append(b, v)
			i += 3
		default: // '.'
			return "", &TopicError{Topic: k, Reason: fmt.Sprintf(
				"'.' at offset %d never appears in a default-rule name (use a reverse rule)", i)}
		}
	}
	t := string(b)
	if reason := topicNameReason(t); reason != "" {
		return "", &TopicError{Topic: k, Reason: "decodes to an invalid MQTT topic: " + reason}
	}
	return t, nil
}
