package bridge

import (
	"context"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSlowClaimWaitsForConnectTimeout: a persistent CONNECT whose claim
// Kafka acknowledges after 2.5 s, with kafka.ack_timeout 1 s, is accepted
// when state.connect_timeout allows it (a reconnect storm's Kafka is slow,
// not gone: a refused client comes back and costs the same work again),
// and refused with Server unavailable when it does not.
func TestSlowClaimWaitsForConnectTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		accept  bool
	}{{"accepted within connect_timeout", 10 * time.Second, true}, {"refused past it", time.Second, false}} {
		t.Run(tc.name, func(t *testing.T) {
			fake, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			cfg := testConfig(strings.Join(fake.ListenAddrs(), ","))
			cfg.Kafka.AckTimeout = time.Second
			cfg.State.ConnectTimeout = tc.timeout
			b := startBridge(t, cfg)
			adm, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			md, err := kadm.NewClient(adm).ListTopics(context.Background(), cfg.State.SessionsTopic)
			if err != nil || !md.Has(cfg.State.SessionsTopic) {
				t.Fatalf("sessions topic: %v", err)
			}
			sessionsID := md[cfg.State.SessionsTopic].ID
			fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				fake.KeepControl()
				for _, tp := range req.(*kmsg.ProduceRequest).Topics {
					if tp.Topic == cfg.State.SessionsTopic || tp.TopicID == sessionsID {
						fake.SleepControl(func() { time.Sleep(2500 * time.Millisecond) })
						break
					}
				}
				return nil, nil, false
			})
			c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID("slow-" + randHex(4)).
				SetCleanSession(false).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(30 * time.Second))
			tok := c.Connect()
			if !tok.WaitTimeout(30 * time.Second) {
				t.Fatal("no CONNACK in 30 s")
			}
			defer c.Disconnect(100)
			code := tok.(*paho.ConnectToken).ReturnCode()
			switch {
			case tc.accept && code != 0:
				t.Fatalf("CONNACK return code %d (%v), want 0: the claim was acknowledged within state.connect_timeout", code, tok.Error())
			case !tc.accept && code != 3:
				t.Fatalf("CONNACK return code %d (%v), want 3 (Server unavailable): the claim took longer than state.connect_timeout", code, tok.Error())
			}
		})
	}
}
