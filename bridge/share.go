package bridge

import (
	"github.com/ferry-bridge/ferry/share"
)

// startShare builds the shared subscriptions' consumer groups (package
// share) and adds their hook to the broker.
func (b *Bridge) startShare(brokers []string) (err error) {
	sec, err := kgoSecurityOpts(b.cfg.Kafka)
	if err != nil {
		return err
	}
	m := share.NewMetrics()
	for _, c := range m.Collectors() {
		if err := b.reg.Register(c); err != nil {
			return err
		}
	}
	b.share, err = share.New(share.Config{Brokers: brokers, InstanceID: b.cfg.Instance.ID,
		SessionTimeout: b.cfg.Share.SessionTimeout, MaxInflight: b.cfg.Share.MaxInflight,
		MaxPacketSize: b.cfg.MQTT.MaxPacketSize, ReadUncommitted: b.cfg.Kafka.IsolationLevel == readUncommitted},
		share.Deps{Log: b.log, Server: b.server, Topics: b.tm, Match: b.stateEngine.ShareTopics, KafkaOpts: sec, Metrics: m})
	return err
}
