package bridge

import (
	"net/http"

	"github.com/ferry-bridge/ferry/admin"
	"github.com/ferry-bridge/ferry/admin/backend"
	"github.com/ferry-bridge/ferry/reverse"
)

// startAdmin builds the admin API (package admin, answered by package
// admin/backend) when http.admin_token is configured: the heartbeats feed
// its instance list, a mochi hook notes connection times, and the control
// topic's reader starts. nil when it is off.
func (b *Bridge) startAdmin() (http.Handler, error) {
	if !b.cfg.HTTP.adminOn() {
		return nil, nil
	}
	token, err := b.cfg.HTTP.adminToken()
	if err != nil {
		return nil, err
	}
	sec, err := kgoSecurityOpts(b.cfg.Kafka)
	if err != nil {
		return nil, err
	}
	cfg := backend.Config{InstanceID: b.cfg.Instance.ID, SessionsTopic: b.cfg.State.SessionsTopic,
		ReplicationFactor: b.cfg.Kafka.ReplicationFactor, Brokers: b.brokers, Started: b.instance.Started()}
	d := backend.Deps{Log: b.log, Server: b.server, Engine: b.stateEngine, Topics: b.tm, Headers: b.hook.hdrs,
		Fleet: b.fleet, Client: b.kclient, KafkaOpts: sec}
	if len(b.cfg.Reverse.Topics) > 0 {
		d.Consumed = reverse.TopicMatcher(b.cfg.Reverse.Topics)
	}
	ab, err := backend.New(cfg, d)
	if err != nil {
		return nil, err
	}
	api, err := admin.New(ab, token, b.log, b.reg)
	if err != nil {
		return nil, err
	}
	if err := ab.Start(); err != nil {
		return nil, err
	}
	b.admin = ab
	return api, nil
}

// closeAdmin stops the control topic's reader.
func (b *Bridge) closeAdmin() {
	if b.admin != nil {
		b.admin.Close()
	}
}
