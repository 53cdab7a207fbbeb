// Package kafkawatch watches the Kafka cluster for the bridge, apart from
// producing and consuming: Watch keeps its reachability current (one
// ApiVersions request a second) for /readyz and the log, and
// ReplicationCheck warns once, when Kafka first answers, if the topics
// Ferry creates would keep one copy on a cluster of several brokers.
// Neither changes what the bridge does: they report. The package knows
// nothing of MQTT.
package kafkawatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// stillDownEvery is how often a Kafka that stays unreachable is logged
// again (the first failure is logged at once).
const stillDownEvery = 30 * time.Second

// Watch keeps Kafka's reachability current for /readyz and the log. The
// first failed check is logged at once with its error, a lasting outage
// again every stillDownEvery, a recovery once; /readyz carries the last
// error.
type Watch struct {
	log     *slog.Logger
	brokers []string
	repeat  time.Duration

	mu        sync.Mutex
	checked   bool
	err       error // last check's error; nil: reachable
	downSince time.Time
	lastLog   time.Time
}

// New is a watch of the Kafka at brokers (named in its log lines); Run
// runs it.
func New(log *slog.Logger, brokers []string) *Watch {
	return &Watch{log: log, brokers: brokers, repeat: stillDownEvery}
}

// observe records one check's result at now and logs what changed.
func (w *Watch) observe(now time.Time, err error) {
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

// Status is Kafka's part of /readyz.
func (w *Watch) Status() (bool, string) {
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

// Run checks Kafka every second until ctx ends.
func (w *Watch) Run(ctx context.Context, client *kafka.Client) {
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
