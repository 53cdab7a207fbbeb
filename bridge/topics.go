package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/segmentio/kafka-go"
)

// topicManager knows the partition count of every Kafka topic the bridge
// writes to and creates missing topics with message.timestamp.type=
// LogAppendTime, up to a cap. Existing topics are used as they are.
type topicManager struct {
	cfg     KafkaConfig
	log     *slog.Logger
	client  *kafka.Client
	metrics *metrics

	mu      sync.Mutex
	known   map[string]int
	created int
}

func newTopicManager(cfg KafkaConfig, log *slog.Logger, client *kafka.Client, m *metrics) *topicManager {
	return &topicManager{cfg: cfg, log: log, client: client, metrics: m, known: make(map[string]int)}
}

// partitions returns the partition count of topic, creating the topic when
// it does not exist. ErrTopicRejected is permanent; other errors are not.
func (m *topicManager) partitions(ctx context.Context, topic string) (int, error) {
	m.mu.Lock()
	n, ok := m.known[topic]
	m.mu.Unlock()
	if ok {
		return n, nil
	}
	md, err := m.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("metadata for %q: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		switch {
		case t.Error == nil && len(t.Partitions) > 0:
			m.mu.Lock()
			m.known[topic] = len(t.Partitions)
			m.mu.Unlock()
			return len(t.Partitions), nil
		case t.Error == nil || errors.Is(t.Error, kafka.UnknownTopicOrPartition):
			return 0, m.create(ctx, topic)
		case errors.Is(t.Error, kafka.TopicAuthorizationFailed), errors.Is(t.Error, kafka.InvalidTopic):
			return 0, fmt.Errorf("%w: %q: %v", ErrTopicRejected, topic, t.Error)
		default:
			return 0, fmt.Errorf("metadata for %q: %w", topic, t.Error)
		}
	}
	return 0, m.create(ctx, topic)
}

// create creates topic and returns a retriable "not ready" error: the next
// metadata request sees the partitions.
func (m *topicManager) create(ctx context.Context, topic string) error {
	m.mu.Lock()
	if m.cfg.MaxCreatedTopics > 0 && m.created >= m.cfg.MaxCreatedTopics {
		m.mu.Unlock()
		return fmt.Errorf("%w: %q does not exist and this instance already created kafka.max_created_topics=%d topics", ErrTopicRejected, topic, m.cfg.MaxCreatedTopics)
	}
	m.mu.Unlock()
	res, err := m.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic:             topic,
		NumPartitions:     m.cfg.Partitions,
		ReplicationFactor: m.cfg.ReplicationFactor,
		ConfigEntries: []kafka.ConfigEntry{
			{ConfigName: "message.timestamp.type", ConfigValue: "LogAppendTime"},
		},
	}}})
	if err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	if terr := res.Errors[topic]; terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
		if errors.Is(terr, kafka.InvalidTopic) || errors.Is(terr, kafka.TopicAuthorizationFailed) ||
			errors.Is(terr, kafka.InvalidReplicationFactor) || errors.Is(terr, kafka.InvalidPartitionNumber) ||
			errors.Is(terr, kafka.PolicyViolation) || errors.Is(terr, kafka.InvalidConfiguration) {
			return fmt.Errorf("%w: create %q: %v", ErrTopicRejected, topic, terr)
		}
		return fmt.Errorf("create topic %q: %w", topic, terr)
	} else if terr == nil {
		m.mu.Lock()
		m.created++
		m.mu.Unlock()
		m.metrics.topicsCreated.Inc()
		m.log.Info("created kafka topic", "topic", topic, "partitions", m.cfg.Partitions,
			"replication_factor", m.cfg.ReplicationFactor, "timestamp_type", "LogAppendTime")
	}
	return fmt.Errorf("topic %q created, waiting for its partitions", topic)
}

// forget drops the cached partition count (after a leader or topic error).
func (m *topicManager) forget(topic string) {
	m.mu.Lock()
	delete(m.known, topic)
	m.mu.Unlock()
}

// partitionFor picks the partition of a key the way Kafka's Java client does
// (murmur2, positive, modulo), so Ferry and Java producers agree on it.
func partitionFor(key []byte, n int) int {
	if n <= 1 {
		return 0
	}
	return int(murmur2(key)&0x7fffffff) % n
}

// murmur2 is Kafka's Utils.murmur2.
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n4 := length / 4
	for i := 0; i < n4; i++ {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= uint32(data[(length&^3)+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[(length&^3)+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[length&^3])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
