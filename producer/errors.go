package producer

import "errors"

// The errors a record can end with. Each is wrapped with detail; test with
// errors.Is.
var (
	// ErrKafkaUnavailable: Kafka did not acknowledge in time (down,
	// unreachable, the record's deadline passed, or the producer is
	// shutting down), or an earlier record of the key failed (the record
	// was refused to keep the key's order).
	ErrKafkaUnavailable = errors.New("kafka unavailable")
	// ErrKafkaRejected: Kafka refused the record for good.
	ErrKafkaRejected = errors.New("kafka rejected the record")
	// ErrTooLarge: the record exceeds what Kafka accepts.
	ErrTooLarge = errors.New("record too large")
	// ErrTopicRejected: the topic cannot be created or written (invalid
	// name, Config.MaxCreatedTopics, authorization).
	ErrTopicRejected = errors.New("topic rejected")
)
