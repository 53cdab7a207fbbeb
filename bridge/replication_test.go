package bridge

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestCreatedTopicsAskForClusterReplication (issue 31, bug 5): with the
// default kafka.replication_factor every topic Ferry creates (the two state
// topics through franz-go, _ferry_instances and a data topic through
// kafka-go) is requested with replication factor -1, the brokers'
// default.replication.factor, not 1 (one copy, on one broker, on a
// 3-broker cluster too).
func TestCreatedTopicsAskForClusterReplication(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close) // after the bridge's Close
	var mu sync.Mutex
	asked := map[string][]int16{} // topic -> replication factors requested
	fake.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.CreateTopicsRequest).Topics {
			asked[rt.Topic] = append(asked[rt.Topic], rt.ReplicationFactor)
		}
		return nil, nil, false // kfake creates it
	})
	cfg := testConfig(strings.Join(fake.ListenAddrs(), ","))
	b := startBridge(t, cfg)
	topic := uniqueTopic("rf")
	mustPublish(t, connectV5(t, b.MQTTAddr(), "rf-"+randHex(3)), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})

	want := []string{cfg.State.SessionsTopic, cfg.State.RetainedTopic, instancesTopic, kafkaName(t, topic)}
	waitFor(t, 10*time.Second, "CreateTopics requests for "+strings.Join(want, ", "), func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range want {
			if len(asked[name]) == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(asked))
	for name := range asked {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, rf := range asked[name] {
			if rf != -1 {
				t.Errorf("CreateTopics %s: replication factor %d, want -1 (the cluster's default.replication.factor) with the default kafka.replication_factor", name, rf)
			}
		}
	}
}

// TestCreatedTopicsGetBrokerDefaultReplication: against the real Kafka,
// the topics a bridge with the default config creates have as many
// replicas as the broker's default.replication.factor says (kafka-go
// negotiates a CreateTopics version that takes -1; franz-go too). The test
// broker is one node (default.replication.factor=1); on a 3-broker cluster
// the same check gives 3 (docs/deployment.md).
func TestCreatedTopicsGetBrokerDefaultReplication(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cfg := testConfig(brokers)
	b := startBridge(t, cfg)
	topic := uniqueTopic("rfreal")
	mustPublish(t, connectV5(t, b.MQTTAddr(), "rfreal-"+randHex(3)), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})

	client := kafkatest.Client(brokers)
	defer kafkatest.CloseClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil || len(md.Brokers) == 0 {
		t.Fatalf("metadata: %v (%d brokers)", err, len(md.Brokers))
	}
	def, err := brokerDefaultReplication(ctx, client, md.Brokers[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{kafkaName(t, topic), cfg.State.SessionsTopic, cfg.State.RetainedTopic} {
		var replicas []int
		waitFor(t, 10*time.Second, "the partitions of "+name, func() bool {
			md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{name}})
			if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) == 0 {
				return false
			}
			replicas = replicas[:0]
			for _, p := range md.Topics[0].Partitions {
				replicas = append(replicas, len(p.Replicas))
			}
			return true
		})
		for i, n := range replicas {
			if n != def {
				t.Errorf("topic %s partition %d: %d replicas, want the broker's default.replication.factor %d", name, i, n, def)
			}
		}
	}
}

// TestReplicationWarning: the start-up check warns when the topics Ferry
// creates would keep one copy on a cluster of several brokers: configured
// 1, or -1 with the brokers' default.replication.factor 1. Not with -1 and
// a default of 3, nor on one broker.
func TestReplicationWarning(t *testing.T) {
	for _, tc := range []struct {
		name       string
		brokers    int
		def        string // default.replication.factor; "": kfake's (3)
		configured int
		warn       string
	}{
		{"configured 1 on 3 brokers", 3, "", 1, "kafka.replication_factor is 1 on a cluster of several brokers"},
		{"cluster default 1 on 3 brokers", 3, "1", -1, "which is 1 on a cluster of several brokers"},
		{"cluster default 3 on 3 brokers", 3, "", -1, ""},
		{"configured 3 on 3 brokers", 3, "1", 3, ""},
		{"configured 1 on 1 broker", 1, "", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kfake.Opt{kfake.NumBrokers(tc.brokers)}
			if tc.def != "" {
				opts = append(opts, kfake.BrokerConfigs(map[string]string{"default.replication.factor": tc.def}))
			}
			fake, err := kfake.NewCluster(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer fake.Close()
			client := kafkatest.Client(strings.Join(fake.ListenAddrs(), ","))
			defer kafkatest.CloseClient(client)
			logs := new(lockedBuffer)
			rc := &replicationCheck{log: slog.New(slog.NewTextHandler(logs, nil)), client: client, configured: tc.configured, retry: 10 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rc.check(ctx); err != nil {
				t.Fatal(err)
			}
			got := logs.String()
			switch {
			case tc.warn == "" && got != "":
				t.Errorf("logged %q, want nothing", got)
			case tc.warn != "" && (!strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.warn)):
				t.Errorf("logged %q, want a WARN saying %q", got, tc.warn)
			}
		})
	}
	// And a bridge does it at start.
	fake, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close) // after the bridge's Close
	cfg := testConfig(strings.Join(fake.ListenAddrs(), ","))
	cfg.Kafka.ReplicationFactor = 1
	b, logs, errc := runLogged(t, cfg)
	awaitReady(t, b, errc)
	waitFor(t, 10*time.Second, "the start-up warning of replication factor 1 on 3 brokers", func() bool {
		return strings.Contains(logs.String(), "kafka.replication_factor is 1 on a cluster of several brokers")
	})
}
