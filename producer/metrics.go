package producer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the collectors the producer updates. The caller creates and
// registers them (names and labels are its own); a nil one counts nothing.
type Metrics struct {
	RecordsProduced prometheus.Counter  // records Kafka acknowledged
	ProduceErrors   prometheus.Counter  // records that failed (timeout, rejection, shutdown, key order)
	Dropped         prometheus.Counter  // QoS 0 records dropped at a stalled, full partition
	TopicsCreated   prometheus.Counter  // topics the producer created
	BatchSize       prometheus.Observer // records per produce request
	ProduceLatency  prometheus.Observer // produce request round trip, seconds
	PublishToAck    prometheus.Observer // from Record.Received to Kafka's acknowledgement, seconds
	Held            prometheus.Gauge    // records held now (queued and in flight)
	Topics          prometheus.Gauge    // topics the producer keeps state for now
}

// orDiscard fills the nil collectors of m with unregistered ones.
func (m Metrics) orDiscard() Metrics {
	counter := func(c *prometheus.Counter) {
		if *c == nil {
			*c = prometheus.NewCounter(prometheus.CounterOpts{Name: "discarded"})
		}
	}
	observer := func(o *prometheus.Observer) {
		if *o == nil {
			*o = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "discarded"})
		}
	}
	gauge := func(g *prometheus.Gauge) {
		if *g == nil {
			*g = prometheus.NewGauge(prometheus.GaugeOpts{Name: "discarded"})
		}
	}
	counter(&m.RecordsProduced)
	counter(&m.ProduceErrors)
	counter(&m.Dropped)
	counter(&m.TopicsCreated)
	observer(&m.BatchSize)
	observer(&m.ProduceLatency)
	observer(&m.PublishToAck)
	gauge(&m.Held)
	gauge(&m.Topics)
	return m
}
