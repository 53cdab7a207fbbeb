package bridge

import "errors"

// Errors a publish or a record can end with. Each is wrapped with detail;
// test with errors.Is.
var (
	// ErrKafkaUnavailable: Kafka did not acknowledge in time (down,
	// unreachable, or the bridge is shutting down). MQTT v5: reason 0x80.
	ErrKafkaUnavailable = errors.New("kafka unavailable")
	// ErrKafkaRejected: Kafka refused the record for good. MQTT v5: 0x80.
	ErrKafkaRejected = errors.New("kafka rejected the record")
	// ErrTooLarge: the record exceeds what Kafka accepts. MQTT v5: 0x95.
	ErrTooLarge = errors.New("record too large")
	// ErrTopicRejected: the topic cannot be mapped or created (invalid name,
	// the created-topics cap, authorization). MQTT v5: 0x90.
	ErrTopicRejected = errors.New("topic rejected")
	// ErrRingFull: the buffer stayed full for the whole ack timeout.
	// MQTT v5: 0x97 (quota exceeded).
	ErrRingFull = errors.New("ring full")
	// ErrClosed: the bridge is shutting down.
	ErrClosed = errors.New("bridge closed")
)
