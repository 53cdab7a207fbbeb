package probe

import (
	"context"
	"fmt"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

	pubs, err := connectMany(cfg, cfg.MQTT, r.clientID("pub"), cfg.Clients, r.log)
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

// subscribeAll connects n subscribers to url and subscribes each to topic,
// one stream each.
func (r *runner) subscribeAll(url, topic string, n int) ([]paho.Client, error) {
	streams := r.newStreams(n, false)
	subs, err := connectMany(r.cfg, url, r.clientID("sub"), n, r.log)
	if err != nil {
		return nil, err
	}
	for i, c := range subs {
		s := streams[i]
		h := func(_ paho.Client, m paho.Message) { s.observe(m.Payload(), r.clk.now(), noAppend) }
		if err := subscribe(c, url, topic, byte(r.cfg.QoS), r.cfg.ConnectTimeout, h); err != nil {
			disconnectAll(subs)
			return nil, err
		}
	}
	return subs, nil
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
	subs, err := r.subscribeAll(cfg.MQTT, cfg.Topic, cfg.Subscribers)
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
	subs, err := r.subscribeAll(cfg.ReplyMQTT, cfg.ReplyTopic, cfg.Subscribers)
	if err != nil {
		return err
	}
	defer disconnectAll(subs)
	pubs, err := connectMany(cfg, cfg.MQTT, r.clientID("pub"), cfg.Clients, r.log)
	if err != nil {
		return err
	}
	defer disconnectAll(pubs)
	return r.generate(ctx, r.mqttSenders(pubs, cfg.MQTT, cfg.Topic))
}
