package bridge

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/reverse"
)

// The label values of the reason-labelled counters. Each series is
// created at 0 when the bridge starts, so that a dashboard or an alert sees
// it before the first event (Prometheus practice), and the HELP texts list
// them all.
var (
	nackReasons        = []string{"kafka_unavailable", "kafka_rejected", "topic_rejected", "ring_full", "too_large", "shutdown"}
	dropReasons        = []string{"ring_full", "ring_evicted", "unmappable_topic", "closed", "session_queue_full"}
	reverseSkipReasons = reverse.SkipReasons
)

func reasons(values []string) string { return strings.Join(values, ", ") }

// metrics are the bridge's Prometheus series, registered on an injected
// registry (no globals). Names are prefixed ferry_.
type metrics struct {
	connections          prometheus.Gauge
	publishesByQoS       *prometheus.CounterVec
	publishes            [3]prometheus.Counter // publishesByQoS resolved per QoS (hot path)
	recordsProduced      prometheus.Counter
	produceErrors        prometheus.Counter
	drops                *prometheus.CounterVec
	nacks                *prometheus.CounterVec
	topicsCreated        prometheus.Counter
	batchSize            prometheus.Histogram
	produceLatency       prometheus.Histogram
	publishToAck         prometheus.Histogram
	reverseConsumed      prometheus.Counter
	reversePublished     prometheus.Counter
	reverseSkipped       *prometheus.CounterVec
	reverseLag           *prometheus.GaugeVec
	demandConsumed       prometheus.Counter
	demandPublished      prometheus.Counter
	demandSkipped        *prometheus.CounterVec
	demandLag            *prometheus.GaugeVec
	subscriberDrops      prometheus.Counter
	reservedPropsDropped prometheus.Counter
	producerHeld         prometheus.Gauge
	producerTopics       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, ringLen, ringCap func() float64) (*metrics, error) {
	latencyBuckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100us .. ~13s
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_mqtt_connections",
			Help: "MQTT clients connected now."}),
		publishesByQoS: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_mqtt_publishes_received_total",
			Help: "PUBLISH packets received from MQTT clients (not inline), by QoS."}, []string{"qos"}),
		recordsProduced: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_kafka_records_produced_total",
			Help: "Records Kafka acknowledged."}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_kafka_produce_errors_total",
			Help: "Records that failed to reach Kafka (timeout, rejection, shutdown)."}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_dropped_total",
			Help: "MQTT publishes not bridged, by reason (" + reasons(dropReasons) + "; closed: the ring was closed at shutdown; session_queue_full: beyond state.max_queued for a resuming session)."}, []string{"reason"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_mqtt_nacks_total",
			Help: "QoS 1/2 publishes refused to the client (v5 reason code or v3 disconnect), by reason (" + reasons(nackReasons) + ")."}, []string{"reason"}),
		topicsCreated: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_kafka_topics_created_total",
			Help: "Kafka topics this instance created."}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_kafka_batch_records",
			Help: "Records per produce request.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		produceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_kafka_produce_seconds",
			Help: "Produce request round trip.", Buckets: latencyBuckets}),
		publishToAck: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_publish_to_kafka_ack_seconds",
			Help: "From MQTT PUBLISH received to Kafka acknowledgement.", Buckets: latencyBuckets}),
		reverseConsumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_reverse_records_consumed_total",
			Help: "Kafka records consumed by the reverse path."}),
		reversePublished: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_reverse_published_total",
			Help: "Kafka records published to MQTT."}),
		reverseSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_reverse_skipped_total",
			Help: "Kafka records not published to MQTT, by reason (" + reasons(reverseSkipReasons) + ")."}, []string{"reason"}),
		reverseLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_reverse_consumer_lag",
			Help: "Reverse consumer lag in records, per topic and partition."}, []string{"topic", "partition"}),
		demandConsumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_demand_records_consumed_total",
			Help: "Kafka records read on demand (reverse.on_demand) for this instance's live subscriptions, this instance's own skipped among them."}),
		demandPublished: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_demand_published_total",
			Help: "Kafka records read on demand and published to MQTT."}),
		demandSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_demand_skipped_total",
			Help: "Kafka records read on demand and not published to MQTT, by reason (" + reasons(reverseSkipReasons) + "; own_origin: this instance's own, delivered here by the forward path)."}, []string{"reason"}),
		demandLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_demand_consumer_lag",
			Help: "Lag in records of the topics read on demand, per topic and partition."}, []string{"topic", "partition"}),
		subscriberDrops: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_mqtt_subscriber_drops_total",
			Help: "Messages dropped for a subscriber: its outbound queue (mqtt.client_writes_pending) or its in-flight store (8,192 QoS 1/2 messages, also for an offline session) was full."}),
		reservedPropsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ferry_reserved_properties_dropped_total",
			Help: "MQTT v5 user properties not copied to Kafka headers because their name is reserved (mqtt.*, ferry.*, or a header a forward rule sets)."}),
		producerHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_kafka_producer_records_held",
			Help: "Records the producer holds now (queued per partition and in flight); bounded while Kafka is away."}),
		producerTopics: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_kafka_producer_topics",
			Help: "Kafka topics the producer keeps state for now (idle ones are dropped)."}),
	}
	cs := []prometheus.Collector{m.connections, m.publishesByQoS, m.recordsProduced, m.produceErrors,
		m.drops, m.nacks, m.topicsCreated, m.batchSize, m.produceLatency, m.publishToAck,
		m.reverseConsumed, m.reversePublished, m.reverseSkipped, m.reverseLag, m.subscriberDrops, m.reservedPropsDropped,
		m.demandConsumed, m.demandPublished, m.demandSkipped, m.demandLag,
		m.producerHeld, m.producerTopics,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ferry_ring_depth", Help: "Messages in the ring now."}, ringLen),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ferry_ring_capacity", Help: "Ring capacity."}, ringCap),
	}
	for q := range m.publishes {
		m.publishes[q] = m.publishesByQoS.WithLabelValues(qosLabel[q])
	}
	for _, vr := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{{m.nacks, nackReasons}, {m.drops, dropReasons}, {m.reverseSkipped, reverseSkipReasons}, {m.demandSkipped, reverseSkipReasons}} {
		for _, v := range vr.values {
			vr.vec.WithLabelValues(v) // a series at 0 from the start
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// producer is the producer's share of the series.
func (m *metrics) producer() producer.Metrics {
	return producer.Metrics{
		RecordsProduced: m.recordsProduced,
		ProduceErrors:   m.produceErrors,
		Dropped:         m.drops.WithLabelValues("ring_full"),
		TopicsCreated:   m.topicsCreated,
		BatchSize:       m.batchSize,
		ProduceLatency:  m.produceLatency,
		PublishToAck:    m.publishToAck,
		Held:            m.producerHeld,
		Topics:          m.producerTopics,
	}
}

// demandMetrics is the demand consumer's share of the series (demand.go).
func (m *metrics) demandMetrics() reverse.Metrics {
	return reverse.Metrics{Consumed: m.demandConsumed, Published: m.demandPublished,
		Skipped: m.demandSkipped, Lag: m.demandLag}
}

// reverseMetrics is the reverse consumer's share of the series.
func (m *metrics) reverseMetrics() reverse.Metrics {
	return reverse.Metrics{Consumed: m.reverseConsumed, Published: m.reversePublished,
		Skipped: m.reverseSkipped, Lag: m.reverseLag}
}
