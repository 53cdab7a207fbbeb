// Package kafkaclient holds what the bridge, the reverse consumer and the
// test helpers share about Kafka clients: closing a segmentio/kafka-go
// client's transport, a slog adapter for franz-go's logger, and deleting a
// benchmark run's topics.
package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CloseIdle closes c's transport (a *kafka.Transport; other RoundTrippers
// are left alone). A kafka-go transport left open keeps its connection
// pools and a goroutine that fetches the whole cluster's metadata every few
// seconds. c may be used again (a new pool is opened).
func CloseIdle(c *kafka.Client) {
	if t, ok := c.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}

// KgoLogger adapts slog to franz-go's logger (kgo.WithLogger); franz-go's
// info level is chatty (every join and assignment), so it is logged at
// debug.
type KgoLogger struct{ Logger *slog.Logger }

// Level is the most verbose level the slog logger takes.
func (l KgoLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case l.Logger.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelInfo
	case l.Logger.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelError
}

// Log logs one franz-go line: errors and warnings as such, the rest at
// debug.
func (l KgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.Logger.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		l.Logger.Warn(msg, keyvals...)
	default:
		l.Logger.Debug(msg, keyvals...)
	}
}

// DeleteTopicsPrefixed deletes every topic whose name starts with prefix,
// and the topics named in also (a benchmark run's own, at its end); a topic
// already gone is no error.
func DeleteTopicsPrefixed(ctx context.Context, brokers []string, prefix string, also ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	names, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	del := append([]string(nil), also...)
	for _, n := range names.Names() {
		if strings.HasPrefix(n, prefix) {
			del = append(del, n)
		}
	}
	if len(del) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, del...)
	if err != nil {
		return fmt.Errorf("delete topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			err = errors.Join(err, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err))
		}
	}
	return err
}
