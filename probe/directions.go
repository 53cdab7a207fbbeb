package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/probe/stats"
)

// mqttToKafka publishes on MQTT and consumes the mapped Kafka topic from
// the end offsets taken before the first publish.
func (r *runner) mqttToKafka(ctx context.Context) error {
	cfg := r.cfg
	admCl, err := newKafka(ctx, cfg)
	if err != nil {
		return err
	}
	defer admCl.Close()
	ti, err := describeTopic(ctx, kadm.NewClient(admCl), r.kafkaTopic)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKafkaUnreachable, err)
	}
	var opts []kgo.Opt
	if ti.exists {
		offs := map[int32]kgo.Offset{}
		for p, o := range ti.end {
			offs[p] = kgo.NewOffset().At(o)
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.kafkaTopic: offs}))
	} else {
		// The bridge creates the topic on the first publish: read it from
		// its start, and look for it often.
		opts = append(opts, kgo.ConsumeTopics(r.kafkaTopic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.MetadataMinAge(100e6), kgo.MetadataMaxAge(1e9))
		r.checks = append(r.checks, fmt.Sprintf("kafka topic %s did not exist before the run: consumed from its start "+
			"(first messages include the consumer's discovery delay: use --warmup)", r.kafkaTopic))
	}
	consumer, err := newKafka(ctx, cfg, opts...)
	if err != nil {
		return err
	}
	defer consumer.Close()

	pubs, err := connectMany(cfg, cfg.MQTT, r.clientID("pub"), cfg.Clients, r.opener(cfg.MQTT), r.log)
	if err != nil {
		return err
	}
	defer disconnectAll(pubs)

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
	err = r.generate(ctx, r.mqttSenders(pubs, cfg.MQTT, cfg.Topic))
	if !ti.exists && err == nil {
		// The bridge created it during the run: read its config now.
		ti.tsConfig = timestampConfig(ctx, kadm.NewClient(admCl), r.kafkaTopic)
	}
	r.checks = append(r.checks, ts.describe(r.kafkaTopic, ti.tsConfig))
	return err
}

func (r *runner) mqttSenders(clients []paho.Client, url, topic string) []sender {
	out := make([]sender, len(clients))
	for i, c := range clients {
		out[i] = newMQTTSender(c, url, topic, byte(r.cfg.QoS), r.cfg.Timeout, r.cfg.Rate > 0)
	}
	return out
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
			h := func(_ paho.Client, m paho.Message) { s.observe(m.Payload(), r.clk.now(), noAppend) }
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
// mapped Kafka topic.
func (r *runner) kafkaToMQTT(ctx context.Context) error {
	cfg := r.cfg
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
		if !cfg.CreateTopic {
			return fmt.Errorf("%w: %s on %v: the bridge's reverse path must consume it; create it or pass --create-topic",
				ErrTopicMissing, r.kafkaTopic, cfg.Kafka)
		}
		if err := createTopic(ctx, adm, r.kafkaTopic); err != nil {
			return err
		}
		r.checks = append(r.checks, fmt.Sprintf("kafka topic %s created by the probe (1 partition, LogAppendTime)", r.kafkaTopic))
	}
	subs, err := r.subscribeAll(ctx, cfg.MQTT, cfg.Topic, cfg.Subscribers)
	if err != nil {
		return err
	}
	defer disconnectAll(subs)
	senders := make([]sender, cfg.Clients)
	for i := range senders {
		senders[i] = &kafkaSender{cl: cl, topic: r.kafkaTopic, open: cfg.Rate > 0}
	}
	return r.generate(ctx, senders)
}

// roundtrip publishes on MQTT and subscribes where the bridge routes the
// messages back from Kafka. Send and receive share one clock.
func (r *runner) roundtrip(ctx context.Context) error {
	cfg := r.cfg
	subs, err := r.subscribeAll(ctx, cfg.ReplyMQTT, cfg.ReplyTopic, cfg.Subscribers)
	if err != nil {
		return err
	}
	defer disconnectAll(subs)
	pubs, err := connectMany(cfg, cfg.MQTT, r.clientID("pub"), cfg.Clients, r.opener(cfg.MQTT), r.log)
	if err != nil {
		return err
	}
	defer disconnectAll(pubs)
	return r.generate(ctx, r.mqttSenders(pubs, cfg.MQTT, cfg.Topic))
}
