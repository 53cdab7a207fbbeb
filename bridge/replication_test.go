package bridge

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/instance"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/kafkawatch"
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

	want := []string{cfg.State.SessionsTopic, cfg.State.RetainedTopic, instance.Topic, kafkaName(t, topic)}
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
	def, err := kafkawatch.BrokerDefaultReplication(ctx, client, md.Brokers[0].ID)
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

// TestReplicationWarningAtStart: a bridge makes the replication check
// (package kafkawatch) at start: configured 1 on 3 brokers is warned of.
func TestReplicationWarningAtStart(t *testing.T) {
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
