package bridge

import (
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/instance"
)

// instanceHeartbeat is state.heartbeat_interval's default.
const instanceHeartbeat = instance.DefaultInterval

// newInstanceCheck builds the instance's heartbeat and its duplicate
// instance.id check (package instance); Run starts it.
func newInstanceCheck(cfg Config, log *slog.Logger, reg prometheus.Registerer, client *kafka.Client, brokers []string) (*instance.Check, error) {
	sec, err := kgoSecurityOpts(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	return instance.New(instance.Config{ID: cfg.Instance.ID, SessionsTopic: cfg.State.SessionsTopic,
		Interval: cfg.State.HeartbeatInterval, ReplicationFactor: cfg.Kafka.ReplicationFactor, Brokers: brokers},
		instance.Deps{Log: log, Registerer: reg, Client: client, KafkaOpts: sec})
}

// describeInstance completes this instance's heartbeat for the admin API.
func (b *Bridge) describeInstance(hb *instance.Heartbeat) {
	hb.HTTP, hb.MQTT, hb.Version = b.HTTPAddr(), b.mqttAddrs, instance.Version()
	if b.server != nil {
		hb.Clients = int(atomic.LoadInt64(&b.server.Info.ClientsConnected))
	}
}
