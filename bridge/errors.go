package bridge

import (
	"errors"

	"github.com/ferry-bridge/ferry/producer"
)

// Errors a publish or a record can end with. Each is wrapped with detail;
// test with errors.Is. The first four are the producer's own.
var (
	// ErrKafkaUnavailable: Kafka did not acknowledge in time (down,
	// unreachable, or the bridge is shutting down). MQTT v5: reason 0x80.
	ErrKafkaUnavailable = producer.ErrKafkaUnavailable
	// ErrKafkaRejected: Kafka refused the record for good. MQTT v5: 0x80.
	ErrKafkaRejected = producer.ErrKafkaRejected
	// ErrTooLarge: the record exceeds what Kafka accepts. MQTT v5: 0x95.
	ErrTooLarge = producer.ErrTooLarge
	// ErrTopicRejected: the topic cannot be mapped or created (invalid name,
	// the created-topics cap, authorization). MQTT v5: 0x90.
	ErrTopicRejected = producer.ErrTopicRejected
	// ErrRingFull: the buffer stayed full for the whole ack timeout.
	// MQTT v5: 0x97 (quota exceeded).
	ErrRingFull = errors.New("ring full")
	// ErrClosed: the bridge is shutting down.
	ErrClosed = errors.New("bridge closed")
)
