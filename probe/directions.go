package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/probe/stamp"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// mqttToKafka publishes on MQTT and consumes the mapped Kafka topics from
// the end offsets taken before the first publish. With AckOnly it consumes
// nothing: the acknowledgements are the measurement.
func (r *runner) mqttToKafka(ctx context.Context) error {
	cfg := r.cfg
	if cfg.AckOnly {
		return r.ackOnly(ctx)
	}
	topics, err := r.kafkaTopics()
	if err != nil {
		return err
	}
	admCl, adm, infos, consumer, err := r.topicConsumer(ctx, topics)
	if err != nil {
		return err
	}
	defer admCl.Close()
	defer consumer.Close()

	pubs, err := r.publishers(ctx, cfg.MQTT, nil)
	if err != nil {
		return err
	}
	s := r.newStreams(1, true)[0]
	var ts tsCounts
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		consume(cctx, consumer, r.clk, s, &ts, func(err error) { r.log.Warn("kafka fetch", "err", err) })
	}()
	defer func() {
		stop()
		wg.Wait()
	}()
	err = r.generate(ctx, pubs.senders)
	pubs.close()
	r.checks = append(r.checks, pubs.describe(cfg))
	if err == nil && len(topics) == 1 {
		r.checks = append(r.checks, ts.describe(topics[0], r.tsConfigAfter(ctx, adm, topics[0], infos[0])))
	} else if err == nil {
		r.checks = append(r.checks, ts.describe(fmt.Sprintf("%d topics %s", len(topics), abbrevList(topics)), ""))
	}
	return err
}

// tsConfigAfter returns the timestamp type config of a topic after a run:
// what describeTopic read before, or, when the topic did not exist then
// (the bridge created it during the run), what it is now.
func (r *runner) tsConfigAfter(ctx context.Context, adm *kadm.Client, topic string, ti topicInfo) string {
	if !ti.exists {
		return timestampConfig(ctx, adm, topic)
	}
	return ti.tsConfig
}

// topicConsumer describes the Kafka topics the bridge writes and returns
// an admin client (close it), the topics' information and a consumer of
// the topics from their end offsets taken now; topics that do not exist
// yet (the bridge creates them on the first publish) are consumed from
// their start, and the checks say so.
func (r *runner) topicConsumer(ctx context.Context, topics []string) (*kgo.Client, *kadm.Client, []topicInfo, *kgo.Client, error) {
	cfg := r.cfg
	admCl, err := newKafka(ctx, cfg)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	adm := kadm.NewClient(admCl)
	infos := make([]topicInfo, len(topics))
	parts := map[string]map[int32]kgo.Offset{}
	var missing []string
	for i, t := range topics {
		if infos[i], err = describeTopic(ctx, adm, t); err != nil {
			admCl.Close()
			return nil, nil, nil, nil, fmt.Errorf("%w: %w", ErrKafkaUnreachable, err)
		}
		if !infos[i].exists {
			missing = append(missing, t)
			continue
		}
		offs := map[int32]kgo.Offset{}
		for p, o := range infos[i].end {
			offs[p] = kgo.NewOffset().At(o)
		}
		parts[t] = offs
	}
	var opts []kgo.Opt
	if len(parts) > 0 {
		opts = append(opts, kgo.ConsumePartitions(parts))
	}
	if len(missing) > 0 {
		// The bridge creates them on the first publish: read them from
		// their start, and look for them often.
		opts = append(opts, kgo.ConsumeTopics(missing...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.MetadataMinAge(100e6), kgo.MetadataMaxAge(1e9))
		r.checks = append(r.checks, fmt.Sprintf("kafka topics %s did not exist before the run: consumed from their start "+
			"(first messages include the consumer's discovery delay: use --warmup)", abbrevList(missing)))
	}
	consumer, err := newKafka(ctx, cfg, opts...)
	if err != nil {
		admCl.Close()
		return nil, nil, nil, nil, err
	}
	return admCl, adm, infos, consumer, nil
}

// ackOnly publishes and measures the acknowledgements only (no Kafka).
func (r *runner) ackOnly(ctx context.Context) error {
	s := r.newStreams(1, false)[0]
	r.metricName = MetricAck
	pubs, err := r.publishers(ctx, r.cfg.MQTT, func(st stamp.Stamp, now int64) { s.observeStamp(st, now, noAppend) })
	if err != nil {
		return err
	}
	err = r.generate(ctx, pubs.senders)
	pubs.close()
	r.checks = append(r.checks, pubs.describe(r.cfg), "ack-only: no Kafka consumer; "+map[bool]string{
		true: fmt.Sprintf("QoS 0 has no acknowledgement: a PINGREQ follows every %d publishes and its PINGRESP (a broker "+
			"handles a connection's packets in order) acknowledges them, so \"ack\" counts publishes the broker processed", pingBatch),
		false: "\"ack\" is the acknowledgement time minus the send time; msg/s counts acknowledged publishes",
	}[r.cfg.QoS == 0])
	return err
}

// abbrevList shows a list of names, shortened beyond three.
func abbrevList(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s,...,%s", strings.Join(names[:2], ","), names[len(names)-1])
}

// subscribeAll connects n subscribers to url, Ramp per second (all at
// once when 0), and subscribes each to topic as soon as it is connected,
// one stream each. Subscribers that fail are counted (connection success
// rate) and left out of the figures; only when none succeeds is it an
// error.
func (r *runner) subscribeAll(ctx context.Context, url, topic string, n int) ([]paho.Client, error) {
	streams := r.newStreams(n, false)
	subs := make([]paho.Client, n)
	errs := make([]error, n)
	connectNs := make([]int64, n)
	prefix := r.clientID("sub")
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if r.cfg.Ramp > 0 {
			due := start.Add(time.Duration(float64(i) * float64(time.Second) / r.cfg.Ramp))
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				wg.Wait()
				disconnectAll(subs)
				return nil, ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			c, err := connectMQTT(r.cfg, url, fmt.Sprintf("%s-%d", prefix, i), r.opener(url), r.log)
			if err != nil {
				errs[i] = err
				return
			}
			connectNs[i] = int64(time.Since(t0))
			s := streams[i]
			h := func(_ paho.Client, m paho.Message) {
				if r.marker != nil && bytes.Equal(m.Payload(), r.marker) {
					r.markerSeen.Do(func() { close(r.markerCh) })
					return
				}
				s.observe(m.Payload(), r.clk.now(), noAppend)
			}
			if err := subscribe(c, url, topic, byte(r.cfg.QoS), r.cfg.ConnectTimeout, h); err != nil {
				errs[i] = err
				c.Disconnect(100)
				return
			}
			subs[i] = c
		}()
	}
	wg.Wait()
	fo := &Fanout{Attempted: n, Ramp: r.cfg.Ramp, connectTime: stats.NewLatency(), RampSeconds: time.Since(start).Seconds()}
	var ok []*stream
	var okSubs []paho.Client
	var failures []error
	for i := range n {
		if errs[i] != nil {
			failures = append(failures, errs[i])
			continue
		}
		fo.connectTime.Record(connectNs[i])
		ok = append(ok, streams[i])
		okSubs = append(okSubs, subs[i])
	}
	fo.Connected = len(ok)
	if len(ok) == 0 {
		return nil, errors.Join(failures...)
	}
	if len(failures) > 0 {
		fo.FirstError = failures[0].Error()
		r.log.Warn("subscribers failed to connect", "failed", len(failures), "of", n, "first", failures[0])
	}
	r.streams = ok
	r.res.Fanout = fo
	return okSubs, nil
}

// kafkaToMQTT subscribes on MQTT and produces stamped records to the
// mapped Kafka topic. It also consumes the topic itself, so one run gives
// the Kafka floor (metric kafka), the bridge's own share (metric bridge) and
// the whole path (e2e) on one clock.
func (r *runner) kafkaToMQTT(ctx context.Context) error {
	cfg := r.cfg
	r.marker = []byte("ferry-probe-path-check " + r.clientID("marker"))
	r.markerCh = make(chan struct{})
	cl, err := newKafka(ctx, cfg, producerOpts(r.kafkaTopic, cfg.Timeout)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ti, err := describeTopic(ctx, adm, r.kafkaTopic)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKafkaUnreachable, err)
	}
	if !ti.exists {
		if cfg.NoCreateTopic {
			return fmt.Errorf("%w: %s on %v: the bridge's reverse path must consume it; create it or drop --no-create-topic",
				ErrTopicMissing, r.kafkaTopic, cfg.Kafka)
		}
		if err := createTopic(ctx, adm, r.kafkaTopic); err != nil {
			return err
		}
		r.checks = append(r.checks, fmt.Sprintf("kafka topic %s did not exist: created by the probe (1 partition, "+
			"message.timestamp.type=LogAppendTime, as the bridge creates topics); the bridge reads it from its first record "+
			"once its reverse path sees the topic", r.kafkaTopic))
		if ti, err = describeTopic(ctx, adm, r.kafkaTopic); err != nil {
			return fmt.Errorf("%w: %w", ErrKafkaUnreachable, err)
		}
	}
	offs := map[int32]kgo.Offset{}
	for p, o := range ti.end {
		offs[p] = kgo.NewOffset().At(o)
	}
	if len(offs) == 0 { // just created, metadata not there yet
		offs[0] = kgo.NewOffset().At(0)
	}
	consumer, err := newKafka(ctx, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.kafkaTopic: offs}))
	if err != nil {
		return err
	}
	defer consumer.Close()
	subs, err := r.subscribeAll(ctx, cfg.MQTT, cfg.Topic, cfg.Subscribers)
	if err != nil {
		return err
	}
	defer disconnectAll(subs)
	if err := r.pathCheck(ctx, cl); err != nil {
		return err
	}
	ks := r.newKafkaStream()
	var ts tsCounts
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		consume(cctx, consumer, r.clk, ks, &ts, func(err error) { r.log.Warn("kafka fetch", "err", err) })
	})
	defer func() {
		stop()
		wg.Wait()
	}()
	senders := make([]sender, cfg.Clients)
	for i := range senders {
		senders[i] = &kafkaSender{cl: cl, topic: r.kafkaTopic, open: cfg.Rate > 0}
	}
	return r.generate(ctx, senders)
}

// pathCheckTimeout bounds the wait for the bridge to deliver the first
// record of the topic (a bridge discovers a new topic at its next metadata
// refresh, 30 s by default).
const pathCheckTimeout = 90 * time.Second

// pathCheck produces a marker record every 200 ms until a subscriber
// receives one: the measured run starts only once the bridge delivers the
// topic, so a bridge that discovers a new topic late loses no measured
// record, and a bridge that does not consume the topic at all is named.
func (r *runner) pathCheck(ctx context.Context, cl *kgo.Client) error {
	start := time.Now()
	deadline := time.NewTimer(pathCheckTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: r.kafkaTopic, Value: r.marker}).FirstErr(); err != nil {
			return fmt.Errorf("%w: produce to %s: %w", ErrSend, r.kafkaTopic, err)
		}
		select {
		case <-r.markerCh:
			r.checks = append(r.checks, fmt.Sprintf("path check: the bridge delivered %s on %s %.3f s after the first marker record; "+
				"the measured run started then", r.kafkaTopic, r.cfg.Topic, time.Since(start).Seconds()))
			return nil
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("%w: no record of Kafka topic %s reached MQTT topic %s on %s within %v: is the topic in the bridge's "+
				"reverse topics (FERRY_REVERSE_TOPICS / reverse.topics)?", ErrSend, r.kafkaTopic, r.cfg.Topic, r.cfg.MQTT, pathCheckTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// roundtrip publishes on MQTT and subscribes where the bridge routes the
// messages back from Kafka. Send and receive share one clock. With
// SplitAtKafka it also consumes the Kafka topic the bridge writes, for the
// LogAppendTime of each message's record (the split at the append).
func (r *runner) roundtrip(ctx context.Context) error {
	cfg := r.cfg
	if cfg.SplitAtKafka {
		admCl, adm, infos, consumer, err := r.topicConsumer(ctx, []string{r.kafkaTopic})
		if err != nil {
			return err
		}
		defer admCl.Close()
		defer consumer.Close()
		r.split = &appendTimes{ms: make([]atomic.Int64, r.gen.total)}
		ks := r.newAppendStream()
		cctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			consume(cctx, consumer, r.clk, ks, &r.splitTS, func(err error) { r.log.Warn("kafka fetch", "err", err) })
		})
		defer func() {
			stop()
			wg.Wait()
		}()
		err = r.roundtripMQTT(ctx)
		if err == nil {
			r.checks = append(r.checks, r.splitTS.describe(r.kafkaTopic, r.tsConfigAfter(ctx, adm, r.kafkaTopic, infos[0])))
		}
		return err
	}
	return r.roundtripMQTT(ctx)
}

// roundtripMQTT is the MQTT side of roundtrip: subscribers, publishers and
// the run.
func (r *runner) roundtripMQTT(ctx context.Context) error {
	cfg := r.cfg
	subs, err := r.subscribeAll(ctx, cfg.ReplyMQTT, cfg.ReplyTopic, cfg.Subscribers)
	if err != nil {
		return err
	}
	defer disconnectAll(subs)
	pubs, err := r.publishers(ctx, cfg.MQTT, nil)
	if err != nil {
		return err
	}
	err = r.generate(ctx, pubs.senders)
	pubs.close()
	r.checks = append(r.checks, pubs.describe(cfg))
	return err
}
