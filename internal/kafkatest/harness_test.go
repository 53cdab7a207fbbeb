package kafkatest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHarnessRoundTrip proves the test harness against the real broker: a LogAppendTime topic
// takes 1,000 records from kafka-go and gives back exactly those records.
func TestHarnessRoundTrip(t *testing.T) {
	const (
		n          = 1000
		partitions = 3
	)
	brokers := Brokers(t)
	topic := Topic(t, "harness")
	CreateTopic(t, brokers, topic, partitions, map[string]string{
		"message.timestamp.type": "LogAppendTime",
	})

	// The topic config is what we asked for.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := Client(brokers)
	defer CloseClient(admin)
	dc, err := admin.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: topic,
			ConfigNames:  []string{"message.timestamp.type"},
		}},
	})
	if err != nil {
		t.Fatalf("DescribeConfigs: %v", err)
	}
	if got := topicConfig(t, dc, topic, "message.timestamp.type"); got != "LogAppendTime" {
		t.Fatalf("message.timestamp.type = %q, want LogAppendTime", got)
	}

	// Produce with an old CreateTime so that a broker-assigned LogAppendTime is visible.
	createTime := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &kafka.Writer{
		Addr:         kafka.TCP(Addrs(brokers)...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    200,
		BatchTimeout: 5 * time.Millisecond,
	}
	want := make(map[string]string, n)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		k, v := fmt.Sprintf("key-%04d", i), fmt.Sprintf("value-%04d-%s", i, topic)
		want[k] = v
		msgs[i] = kafka.Message{Key: []byte(k), Value: []byte(v), Time: createTime}
	}
	start := time.Now()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Writer.Close: %v", err)
	}

	// The log holds exactly n records, and reading gives back exactly what was written.
	if got := RecordCount(t, brokers, topic); got != n {
		t.Fatalf("topic holds %d records, want %d", got, n)
	}
	got := ConsumeAll(t, brokers, topic, n, 60*time.Second)
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
	seen := make(map[string]bool, n)
	lastOffset := map[int]int64{}
	for _, m := range got {
		k := string(m.Key)
		if seen[k] {
			t.Fatalf("duplicate record %q (partition %d offset %d)", k, m.Partition, m.Offset)
		}
		seen[k] = true
		if wv, ok := want[k]; !ok || string(m.Value) != wv {
			t.Fatalf("record %q = %q, want %q (known key: %v)", k, m.Value, wv, ok)
		}
		if last, ok := lastOffset[m.Partition]; ok && m.Offset != last+1 {
			t.Fatalf("partition %d: offset %d follows %d", m.Partition, m.Offset, last)
		}
		lastOffset[m.Partition] = m.Offset
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct records, want %d", len(seen), n)
	}

	// The broker stamped LogAppendTime (kafka-go cannot see it; franz-go can).
	rec := firstRecord(t, brokers, topic)
	if tt := rec.Attrs.TimestampType(); tt != 1 {
		t.Fatalf("timestamp type = %d, want 1 (LogAppendTime)", tt)
	}
	if rec.Timestamp.Before(start.Add(-time.Minute)) {
		t.Fatalf("record timestamp %v is the producer's CreateTime, not the broker's append time", rec.Timestamp)
	}
}

func topicConfig(t *testing.T, dc *kafka.DescribeConfigsResponse, topic, name string) string {
	t.Helper()
	for _, r := range dc.Resources {
		if r.ResourceName != topic {
			continue
		}
		if r.Error != nil {
			t.Fatalf("DescribeConfigs %q: %v", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				return e.ConfigValue
			}
		}
	}
	t.Fatalf("DescribeConfigs: %s of %q not returned", name, topic)
	return ""
}

// firstRecord fetches one record of topic with franz-go, which exposes the timestamp type.
func firstRecord(t *testing.T, brokers, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(Addrs(brokers)...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 1)
		if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
			t.Fatalf("kgo fetch: %v", errs[0].Err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
	t.Fatalf("kgo: no record from %q: %v", topic, ctx.Err())
	return nil
}

// fakeTB records Fatalf instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }
func (f *fakeTB) Name() string                   { return f.TB.Name() }

func TestBrokersFailsWithInstructions(t *testing.T) {
	t.Setenv(EnvVar, "")
	f := &fakeTB{TB: t}
	Brokers(f)
	if !strings.Contains(f.failed, "scripts/kafka.sh up") || !strings.Contains(f.failed, EnvVar) {
		t.Fatalf("Brokers without %s must fail with instructions, got %q", EnvVar, f.failed)
	}
	t.Setenv(EnvVar, " 127.0.0.1:1 , 127.0.0.1:2 ")
	if got := Brokers(t); got != "127.0.0.1:1 , 127.0.0.1:2" {
		t.Fatalf("Brokers = %q", got)
	}
	if got := Addrs(Brokers(t)); len(got) != 2 || got[0] != "127.0.0.1:1" || got[1] != "127.0.0.1:2" {
		t.Fatalf("Addrs = %q", got)
	}
}

func TestTopicNames(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		name := Topic(t, "my.prefix/x")
		if seen[name] {
			t.Fatalf("duplicate topic name %q", name)
		}
		seen[name] = true
		if !strings.HasPrefix(name, "my-prefix-x-TestTopicNames-") {
			t.Fatalf("topic %q lacks prefix and test name", name)
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				t.Fatalf("topic %q has invalid char %q", name, c)
			}
		}
	}
	t.Run("long/sub test name with spaces "+strings.Repeat("x", 300), func(t *testing.T) {
		name := Topic(t, "")
		if len(name) > maxTopicLen || len(name) < 20 {
			t.Fatalf("len(%q) = %d, want 20..%d", name, len(name), maxTopicLen)
		}
	})
}
