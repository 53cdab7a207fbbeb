package bridge

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// kafkaStillDownEvery is how often a Kafka that stays unreachable is logged
// again (the first failure is logged at once).
const kafkaStillDownEvery = 30 * time.Second

// kafkaWatch keeps Kafka's reachability current for /readyz and the log. The
// first failed check is logged at once with its error, a lasting outage
// again every kafkaStillDownEvery, a recovery once; /readyz carries the last
// error.
type kafkaWatch struct {
	log     *slog.Logger
	brokers []string
	repeat  time.Duration

	mu        sync.Mutex
	checked   bool
	err       error // last check's error; nil: reachable
	downSince time.Time
	lastLog   time.Time
}

func newKafkaWatch(log *slog.Logger, brokers []string) *kafkaWatch {
	return &kafkaWatch{log: log, brokers: brokers, repeat: kafkaStillDownEvery}
}

// observe records one check's result at now and logs what changed.
func (w *kafkaWatch) observe(now time.Time, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wasDown := w.checked && w.err != nil
	first := !w.checked
	w.checked, w.err = true, err
	switch {
	case err == nil && (first || wasDown):
		w.log.Info("kafka reachable", "brokers", w.brokers)
	case err != nil && !wasDown:
		w.downSince, w.lastLog = now, now
		w.log.Warn("kafka unreachable", "brokers", w.brokers, "err", err)
	case err != nil && now.Sub(w.lastLog) >= w.repeat:
		w.lastLog = now
		w.log.Warn("kafka still unreachable", "brokers", w.brokers, "for", now.Sub(w.downSince).Round(time.Second), "err", err)
	}
}

// status is Kafka's part of /readyz.
func (w *kafkaWatch) status() (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.checked:
		return false, "kafka not checked yet"
	case w.err != nil:
		return false, "kafka unreachable: " + w.err.Error()
	}
	return true, "ok"
}

// run checks Kafka every second until ctx ends.
func (w *kafkaWatch) run(ctx context.Context, client *kafka.Client) {
	check := func() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// ApiVersions goes to a broker; kafka-go answers Metadata from its cache.
		_, err := client.ApiVersions(cctx, &kafka.ApiVersionsRequest{})
		if ctx.Err() != nil {
			return // stopping: not Kafka's fault
		}
		w.observe(time.Now(), err)
	}
	check()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}
