// Package kafkatest connects tests to the real Apache Kafka started by scripts/kafka.sh and
// gives every test its own uniquely named topics, so tests never share state.
//
// The bootstrap address comes from the FERRY_TEST_KAFKA environment variable. When it is
// missing, Kafka tests fail (they are never skipped) with instructions to start Kafka:
//
//	export FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -n1)
//
// or simply run scripts/test.sh, which starts Kafka, exports the variable and runs all tests.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/kafkaclient"
)

// EnvVar names the environment variable holding the bootstrap address(es), comma-separated.
const EnvVar = "FERRY_TEST_KAFKA"

// maxTopicLen keeps generated names well under Kafka's 249-character limit.
const maxTopicLen = 120

// opTimeout bounds every admin round trip made by this package.
const opTimeout = 30 * time.Second

// Brokers returns the bootstrap address(es) from FERRY_TEST_KAFKA, e.g. "127.0.0.1:9092"
// (comma-separated when several). It fails the test with instructions when the variable is
// unset: Kafka tests are never skipped.
func Brokers(tb testing.TB) string {
	tb.Helper()
	v := strings.TrimSpace(os.Getenv(EnvVar))
	if v == "" {
		tb.Fatalf("%s is not set: this test needs a real Kafka.\n"+
			"Start one and export its address:\n"+
			"\tscripts/kafka.sh up   # prints the bootstrap address as its last line\n"+
			"\texport %s=$(scripts/kafka.sh up | tail -n1)\n"+
			"or run every test with Kafka managed for you: scripts/test.sh", EnvVar, EnvVar)
	}
	return v
}

// Addrs splits a comma-separated broker list into its addresses.
func Addrs(brokers string) []string {
	var out []string
	for _, a := range strings.Split(brokers, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Client returns a kafka-go admin client for brokers. Close it with
// CloseClient when done.
func Client(brokers string) *kafka.Client {
	// A transport of its own: kafka-go answers metadata from a per-transport
	// cache, and a shared one would not yet know a topic created a moment ago.
	return &kafka.Client{Addr: kafka.TCP(Addrs(brokers)...), Timeout: opTimeout, Transport: &kafka.Transport{}}
}

// CloseClient stops c's transport. A kafka-go transport left open keeps a
// goroutine that fetches the whole cluster's metadata every few seconds:
// hundreds of them, against a Kafka holding the thousands of topics a test
// run creates, took a clean-clone run's test binary to 11 GB and most of
// both cores. c may be used again (a new pool is opened).
func CloseClient(c *kafka.Client) { kafkaclient.CloseIdle(c) }

// Topic returns a topic name unique to this call: prefix, the sanitized test name and a
// random suffix. Only [a-zA-Z0-9-] are used, so names never collide through '.' vs '_'.
func Topic(tb testing.TB, prefix string) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("kafkatest: random topic suffix: %v", err)
	}
	suffix := hex.EncodeToString(b[:])
	name := sanitize(prefix)
	if tn := sanitize(tb.Name()); tn != "" {
		if name != "" {
			name += "-"
		}
		name += tn
	}
	if limit := maxTopicLen - len(suffix) - 1; len(name) > limit {
		name = name[:limit]
	}
	if name == "" {
		return "t-" + suffix
	}
	return name + "-" + suffix
}

// sanitize maps every byte outside [a-zA-Z0-9-] to '-' and trims dashes at both ends.
func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			out[i] = '-'
		}
	}
	return strings.Trim(string(out), "-")
}

// CreateTopic creates topic with the given partition count (replication factor 1) and topic
// configs, waits until metadata shows every partition with a leader, and deletes the topic
// when the test ends.
func CreateTopic(tb testing.TB, brokers, topic string, partitions int, configs map[string]string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c := Client(brokers)
	defer CloseClient(c)

	entries := make([]kafka.ConfigEntry, 0, len(configs))
	for k, v := range configs {
		entries = append(entries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	resp, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic:             topic,
		NumPartitions:     partitions,
		ReplicationFactor: 1,
		ConfigEntries:     entries,
	}}})
	if err != nil {
		tb.Fatalf("kafkatest: create topic %q: %v", topic, err)
	}
	if err := resp.Errors[topic]; err != nil {
		tb.Fatalf("kafkatest: create topic %q: %v", topic, err)
	}
	tb.Cleanup(func() {
		deleteTopic(tb, c, topic)
		CloseClient(c)
	})

	if err := waitTopic(ctx, c, topic, partitions); err != nil {
		tb.Fatalf("kafkatest: topic %q not ready: %v", topic, err)
	}
}

// waitTopic polls metadata until topic has want partitions, each with a leader.
func waitTopic(ctx context.Context, c *kafka.Client, topic string, want int) error {
	var last error
	for {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		last = err
		if err == nil {
			last = partitionsReady(md, topic, want)
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func partitionsReady(md *kafka.MetadataResponse, topic string, want int) error {
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return t.Error
		}
		if len(t.Partitions) != want {
			return fmt.Errorf("%d of %d partitions", len(t.Partitions), want)
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.ID < 0 || p.Leader.Host == "" {
				return fmt.Errorf("partition %d has no leader (%v)", p.ID, p.Error)
			}
		}
		return nil
	}
	return errors.New("not in metadata")
}

// DeleteTopic deletes topic and waits until metadata no longer lists it
// (a test that re-creates it must not race the deletion).
func DeleteTopic(tb testing.TB, brokers, topic string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c := Client(brokers)
	defer CloseClient(c)
	if err := deleteTopicReq(ctx, c, topic); err != nil {
		tb.Fatalf("kafkatest: delete topic %q: %v", topic, err)
	}
	for {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err == nil && (len(md.Topics) == 0 || md.Topics[0].Error != nil) {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("kafkatest: topic %q still listed after its deletion", topic)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteTopic deletes topic at the end of a test; a failure is only logged.
func deleteTopic(tb testing.TB, c *kafka.Client, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := deleteTopicReq(ctx, c, topic); err != nil {
		tb.Logf("kafkatest: delete topic %q: %v", topic, err)
	}
}

func deleteTopicReq(ctx context.Context, c *kafka.Client, topic string) error {
	resp, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	if err != nil {
		return err
	}
	return resp.Errors[topic]
}

// ConsumeAll reads records from every partition of topic, starting at the earliest offset and
// without a consumer group, until at least n have arrived (a few more can slip in when several
// partitions deliver at once: assert the exact count yourself). It fails the test if fewer than
// n arrive within timeout. The result is sorted by partition, then offset.
func ConsumeAll(tb testing.TB, brokers, topic string, n int, timeout time.Duration) []kafka.Message {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	c := Client(brokers)
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	CloseClient(c)
	if err != nil {
		tb.Fatalf("kafkatest: metadata for %q: %v", topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name == topic {
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		tb.Fatalf("kafkatest: topic %q has no partitions", topic)
	}

	var (
		mu   sync.Mutex
		msgs []kafka.Message
		wg   sync.WaitGroup
		errs = make([]error, len(parts))
	)
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:   Addrs(brokers),
				Topic:     topic,
				Partition: p,
				MinBytes:  1,
				MaxBytes:  10 << 20,
				MaxWait:   200 * time.Millisecond,
			})
			defer r.Close()
			for {
				m, err := r.ReadMessage(readCtx)
				if err != nil {
					if readCtx.Err() == nil || ctx.Err() != nil {
						errs[i] = err
					}
					return
				}
				mu.Lock()
				msgs = append(msgs, m)
				done := len(msgs) >= n
				mu.Unlock()
				if done {
					stop()
					return
				}
			}
		}()
	}
	wg.Wait()

	if len(msgs) < n {
		tb.Fatalf("kafkatest: consumed %d of %d records from %q within %v (errors: %v)",
			len(msgs), n, topic, timeout, errors.Join(errs...))
	}
	sort.Slice(msgs, func(i, j int) bool {
		if msgs[i].Partition != msgs[j].Partition {
			return msgs[i].Partition < msgs[j].Partition
		}
		return msgs[i].Offset < msgs[j].Offset
	})
	return msgs
}

// RecordCount returns how many records topic holds: the sum over its partitions of the high
// watermark minus the log start offset.
func RecordCount(tb testing.TB, brokers, topic string) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c := Client(brokers)
	defer CloseClient(c)
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		tb.Fatalf("kafkatest: metadata for %q: %v", topic, err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name == topic {
			for _, p := range t.Partitions {
				reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
			}
		}
	}
	if len(reqs) == 0 {
		tb.Fatalf("kafkatest: topic %q has no partitions", topic)
	}
	resp, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		tb.Fatalf("kafkatest: list offsets of %q: %v", topic, err)
	}
	var total int64
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			tb.Fatalf("kafkatest: list offsets of %q partition %d: %v", topic, p.Partition, p.Error)
		}
		total += p.LastOffset - p.FirstOffset
	}
	return total
}
