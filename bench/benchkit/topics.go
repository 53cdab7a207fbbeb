package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkaclient"
)

// runTopics creates one-partition LogAppendTime topics (as Ferry creates
// them), so that every system under test writes to the same kind of topic
// and the probe can measure the Kafka-append latency of each.
func runTopics(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("kafka", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated")
	partitions := fs.Int("partitions", 1, "partitions per topic")
	deletePrefix := fs.String("delete-prefix", "", "instead of creating, delete every topic whose name starts with this prefix")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *deletePrefix != "" {
		return deleteTopics(ctx, strings.Split(*brokers, ","), *deletePrefix)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no topics", errUsage)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	lat := "LogAppendTime"
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(*partitions), 1,
		map[string]*string{"message.timestamp.type": &lat}, fs.Args()...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			err = errors.Join(err, fmt.Errorf("create topic %s: %w", r.Topic, r.Err))
		}
	}
	return err
}

// deleteTopics deletes the topics whose names start with prefix (a
// benchmark's own topics, at its end).
func deleteTopics(ctx context.Context, brokers []string, prefix string) error {
	if len(prefix) < 8 {
		return fmt.Errorf("%w: delete-prefix %q is too short to be one run's own", errUsage, prefix)
	}
	return kafkaclient.DeleteTopicsPrefixed(ctx, brokers, prefix)
}
