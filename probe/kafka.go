package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka timestamp types as kgo.RecordAttrs.TimestampType reports them.
const (
	tsCreateTime    = 0
	tsLogAppendTime = 1
)

// newKafka creates a client and checks that a broker answers within the
// connect timeout.
func newKafka(ctx context.Context, cfg Config, opts ...kgo.Opt) (*kgo.Client, error) {
	opts = append([]kgo.Opt{kgo.SeedBrokers(cfg.Kafka...)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKafkaUnreachable, strings.Join(cfg.Kafka, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("%w: no broker answered at %s within %v: %w",
			ErrKafkaUnreachable, strings.Join(cfg.Kafka, ","), cfg.ConnectTimeout, err)
	}
	return cl, nil
}

// topicInfo is what the probe learns about a Kafka topic before a run.
type topicInfo struct {
	exists bool
	// end holds each partition's end offset when exists.
	end map[int32]int64
	// tsConfig is the topic's message.timestamp.type config, or "" when
	// unknown.
	tsConfig string
}

// describeTopic lists the topic's end offsets and timestamp type config.
func describeTopic(ctx context.Context, adm *kadm.Client, topic string) (topicInfo, error) {
	var ti topicInfo
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return ti, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	ti.end = map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
		case o.Err != nil:
			err = errors.Join(err, fmt.Errorf("%s[%d]: %w", o.Topic, o.Partition, o.Err))
		case o.Partition >= 0:
			ti.end[o.Partition] = o.Offset
		}
	})
	if err != nil {
		return ti, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	ti.exists = len(ti.end) > 0
	if !ti.exists {
		return ti, nil
	}
	ti.tsConfig = timestampConfig(ctx, adm, topic)
	return ti, nil
}

// timestampConfig returns the topic's message.timestamp.type, or "" when it
// cannot be read.
func timestampConfig(ctx context.Context, adm *kadm.Client, topic string) string {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil || len(rcs) != 1 || rcs[0].Err != nil {
		return ""
	}
	for _, c := range rcs[0].Configs {
		if c.Key == "message.timestamp.type" && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// createTopic creates a LogAppendTime topic with one partition and the
// cluster's default replication factor (-1), as the bridge does by default.
func createTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	lat := "LogAppendTime"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"message.timestamp.type": &lat}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create kafka topic %s: %w", topic, err)
	}
	return nil
}

// tsCounts counts the timestamp types of consumed records.
type tsCounts struct {
	logAppend, other atomic.Int64
}

func (c *tsCounts) describe(topic, config string) string {
	if config == "" {
		config = "unknown (topic did not exist before the run or configs not readable)"
	}
	la, other := c.logAppend.Load(), c.other.Load()
	rec := "no records"
	switch {
	case la > 0 && other == 0:
		rec = fmt.Sprintf("LogAppendTime on all %d records", la)
	case la == 0 && other > 0:
		rec = fmt.Sprintf("CreateTime on all %d records", other)
	case la > 0:
		rec = fmt.Sprintf("mixed: %d LogAppendTime, %d other", la, other)
	}
	return fmt.Sprintf("kafka topic %s: message.timestamp.type config %s; records: %s", topic, config, rec)
}

// consume polls cl until ctx ends, feeding every record to s. The receive
// time of a record is when the poll that returned it came back.
func consume(ctx context.Context, cl *kgo.Client, clk clock, s *stream, ts *tsCounts, onErr func(error)) {
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			return
		}
		now := clk.now()
		fetches.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				onErr(fmt.Errorf("fetch %s[%d]: %w", topic, p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			app := int64(noAppend)
			if r.Attrs.TimestampType() == tsLogAppendTime {
				app = r.Timestamp.UnixMilli()
				ts.logAppend.Add(1)
			} else {
				ts.other.Add(1)
			}
			s.observe(r.Value, now, app)
		})
	}
}

// kafkaSender produces one goroutine's records on a shared client. Closed
// loop: ProduceSync per record. Open loop: asynchronous Produce; the first
// failure is kept and returned by flush.
type kafkaSender struct {
	cl    *kgo.Client
	topic string
	open  bool

	mu  sync.Mutex
	err error
}

func (s *kafkaSender) send(ctx context.Context, _ uint32, payload []byte) error {
	rec := &kgo.Record{Topic: s.topic, Value: payload}
	if !s.open {
		if err := s.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("%w: produce to %s: %w", ErrSend, s.topic, err)
		}
		return nil
	}
	s.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = fmt.Errorf("%w: produce to %s: %w", ErrSend, s.topic, err)
			}
			s.mu.Unlock()
		}
	})
	return nil
}

func (s *kafkaSender) flush(ctx context.Context) error {
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// producerOpts are the probe's producer settings: no linger (each record
// leaves at once, like kafka-producer-perf-test with linger.ms=0) and
// acknowledgement by all in-sync replicas.
func producerOpts(topic string, timeout time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(0),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(max(timeout, time.Second)), // kgo's minimum is 1s
	}
}
