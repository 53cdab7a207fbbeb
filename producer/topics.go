package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	createtopicsAPI "github.com/segmentio/kafka-go/protocol/createtopics"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// topicManager reads the leaders of the Kafka topics the producer writes to
// and creates missing topics with message.timestamp.type=LogAppendTime, up
// to a cap. Existing topics are used as they are.
//
// Leaders come from the kafka-go transport's metadata cache, the same view
// the transport routes produce requests by, so a request grouped by these
// leaders reaches one broker. refresh forces that cache to be re-read from
// Kafka at once (kafka-go otherwise keeps it for its MetadataTTL).
type topicManager struct {
	cfg     Config
	log     *slog.Logger
	client  *kafka.Client
	rt      kafka.RoundTripper
	addr    net.Addr
	metrics Metrics

	mu      sync.Mutex
	created int
}

// topicMeta is what resolve learned about one topic: the leader broker id of
// each partition (index = partition id, -1 = no leader now), or an error.
// ErrTopicRejected is permanent; other errors are not.
type topicMeta struct {
	topic   string
	leaders []int32
	err     error
}

func newTopicManager(cfg Config, log *slog.Logger, client *kafka.Client, m Metrics) *topicManager {
	rt := client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return &topicManager{cfg: cfg, log: log, client: client, rt: rt, addr: client.Addr, metrics: m}
}

// refresh makes the transport fetch fresh metadata now and waits for it. An
// empty CreateTopics request does it: kafka-go refreshes its cache after
// every CreateTopics response (transport.go, connPool.roundTrip) and this
// one creates nothing.
func (m *topicManager) refresh(ctx context.Context) error {
	if _, err := m.rt.RoundTrip(ctx, m.addr, &createtopicsAPI.Request{TimeoutMs: 1000}); err != nil {
		return fmt.Errorf("metadata refresh: %w", err)
	}
	return nil
}

// resolve returns the leaders of topics, creating those that do not exist.
// force refreshes the metadata cache first (after NOT_LEADER and the like).
func (m *topicManager) resolve(ctx context.Context, topics []string, force bool) []topicMeta {
	if force {
		if err := m.refresh(ctx); err != nil {
			return failedMeta(topics, err)
		}
	}
	out, missing := m.lookup(ctx, topics)
	if len(missing) == 0 {
		return out
	}
	created, err := m.create(ctx, missing)
	if err != nil {
		return append(out, failedMeta(missing, err)...)
	}
	var again []string
	for _, t := range missing {
		if cerr := created[t]; cerr != nil {
			out = append(out, topicMeta{topic: t, err: cerr})
		} else {
			again = append(again, t)
		}
	}
	if len(again) == 0 {
		return out
	}
	// Topics that already existed (made by someone else) may be missing
	// from the cache until it is refreshed; created ones are there already.
	if err := m.refresh(ctx); err != nil {
		return append(out, failedMeta(again, err)...)
	}
	found, still := m.lookup(ctx, again)
	out = append(out, found...)
	for _, t := range still {
		out = append(out, topicMeta{topic: t, err: fmt.Errorf("topic %q created, waiting for its partitions", t)})
	}
	return out
}

func failedMeta(topics []string, err error) []topicMeta {
	out := make([]topicMeta, len(topics))
	for i, t := range topics {
		out[i] = topicMeta{topic: t, err: err}
	}
	return out
}

// lookup reads the cached metadata of topics: the known ones with their
// leaders (or error), and the names Kafka does not know.
func (m *topicManager) lookup(ctx context.Context, topics []string) (out []topicMeta, missing []string) {
	res, err := m.rt.RoundTrip(ctx, m.addr, &metadataAPI.Request{TopicNames: topics})
	if err != nil {
		return failedMeta(topics, fmt.Errorf("metadata: %w", err)), nil
	}
	md, ok := res.(*metadataAPI.Response)
	if !ok {
		return failedMeta(topics, fmt.Errorf("metadata: unexpected response %T", res)), nil
	}
	seen := make(map[string]bool, len(md.Topics))
	for _, t := range md.Topics {
		seen[t.Name] = true
		terr := kafkaError(t.ErrorCode)
		switch {
		case terr == nil && len(t.Partitions) > 0:
			leaders := make([]int32, len(t.Partitions))
			for i := range leaders {
				leaders[i] = -1
			}
			for _, p := range t.Partitions {
				if p.PartitionIndex >= 0 && int(p.PartitionIndex) < len(leaders) && p.ErrorCode == 0 {
					leaders[p.PartitionIndex] = p.LeaderID
				}
			}
			out = append(out, topicMeta{topic: t.Name, leaders: leaders})
		case terr == nil || errors.Is(terr, kafka.UnknownTopicOrPartition):
			missing = append(missing, t.Name)
		case errors.Is(terr, kafka.TopicAuthorizationFailed), errors.Is(terr, kafka.InvalidTopic):
			out = append(out, topicMeta{topic: t.Name, err: fmt.Errorf("%w: %q: %v", ErrTopicRejected, t.Name, terr)})
		default:
			out = append(out, topicMeta{topic: t.Name, err: fmt.Errorf("metadata for %q: %w", t.Name, terr)})
		}
	}
	for _, t := range topics {
		if !seen[t] {
			missing = append(missing, t)
		}
	}
	return out, missing
}

func kafkaError(code int16) error {
	if code == 0 {
		return nil
	}
	return kafka.Error(code)
}

// create creates topics in one request, up to Config.MaxCreatedTopics. It
// returns, per topic, nil when the topic exists now (created or already
// there) or the reason it does not.
//
// The request goes through the transport itself rather than
// kafka.Client.CreateTopics, which drops what a CreateTopics v5 response
// says of the topic created: its replication factor, the cluster's own
// when Config.ReplicationFactor is ClusterReplicationFactor (the
// bridge's default), is logged.
func (m *topicManager) create(ctx context.Context, topics []string) (map[string]error, error) {
	out := make(map[string]error, len(topics))
	var req []createtopicsAPI.RequestTopic
	m.mu.Lock()
	room := m.cfg.MaxCreatedTopics - m.created
	m.mu.Unlock()
	for _, t := range topics {
		if m.cfg.MaxCreatedTopics > 0 && len(req) >= room {
			out[t] = fmt.Errorf("%w: %q does not exist and this instance already created kafka.max_created_topics=%d topics", ErrTopicRejected, t, m.cfg.MaxCreatedTopics)
			continue
		}
		req = append(req, createtopicsAPI.RequestTopic{
			Name:              t,
			NumPartitions:     int32(m.cfg.Partitions),
			ReplicationFactor: int16(m.cfg.ReplicationFactor),
			Configs:           []createtopicsAPI.RequestConfig{{Name: "message.timestamp.type", Value: "LogAppendTime"}},
		})
	}
	if len(req) == 0 {
		return out, nil
	}
	if m.client.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.client.Timeout)
		defer cancel()
	}
	// Kafka's own wait: half of what is left, as kafka-go does, so that its
	// answer comes back in time.
	wait := createTopicsTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl)/2, time.Millisecond)
	}
	msg, err := m.rt.RoundTrip(ctx, m.addr, &createtopicsAPI.Request{Topics: req, TimeoutMs: int32(wait / time.Millisecond)})
	if err != nil {
		return nil, fmt.Errorf("create topics: %w", err)
	}
	res, ok := msg.(*createtopicsAPI.Response)
	if !ok {
		return nil, fmt.Errorf("create topics: unexpected response %T", msg)
	}
	answers := make(map[string]createtopicsAPI.ResponseTopic, len(res.Topics))
	for _, rt := range res.Topics {
		answers[rt.Name] = rt
	}
	for _, tc := range req {
		t := tc.Name
		a, answered := answers[t]
		var terr error
		switch {
		case !answered:
			terr = errors.New("not in the CreateTopics response")
		case a.ErrorCode != 0 && a.ErrorMessage != "":
			terr = fmt.Errorf("%w: %s", kafka.Error(a.ErrorCode), a.ErrorMessage)
		default:
			terr = kafkaError(a.ErrorCode)
		}
		switch {
		case terr == nil:
			m.mu.Lock()
			m.created++
			m.mu.Unlock()
			m.metrics.TopicsCreated.Inc()
			stamp := []any{"timestamp_type", "LogAppendTime"}
			if m.cfg.Embedded {
				stamp = []any{"timestamp_type", "CreateTime", "note", "the embedded Kafka keeps message.timestamp.type=LogAppendTime but stamps the producer's CreateTime"}
			}
			m.log.Info("created kafka topic", append([]any{"topic", t, "partitions", m.cfg.Partitions,
				"replication_factor", createdReplication(m.cfg.ReplicationFactor, a.ReplicationFactor)}, stamp...)...)
		case errors.Is(terr, kafka.TopicAlreadyExists):
		case errors.Is(terr, kafka.InvalidTopic), errors.Is(terr, kafka.TopicAuthorizationFailed),
			errors.Is(terr, kafka.InvalidReplicationFactor), errors.Is(terr, kafka.InvalidPartitionNumber),
			errors.Is(terr, kafka.PolicyViolation), errors.Is(terr, kafka.InvalidConfiguration):
			out[t] = fmt.Errorf("%w: create %q: %v", ErrTopicRejected, t, terr)
		default:
			out[t] = fmt.Errorf("create topic %q: %w", t, terr)
		}
	}
	return out, nil
}

// createTopicsTimeout is how long Kafka may take to create topics when the
// request has no deadline (kafka-go's default).
const createTopicsTimeout = 2 * time.Second

// createdReplication is what to log as a created topic's replication factor:
// the one Kafka reports (CreateTopics v5+), else the one requested, where -1
// reads as the cluster's default.
func createdReplication(configured int, reported int16) any {
	switch {
	case reported > 0:
		return int(reported)
	case configured == ClusterReplicationFactor:
		return "cluster default"
	}
	return configured
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
