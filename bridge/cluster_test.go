package bridge

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// clusterEnv=0 skips TestThreeBrokersKillOne (so does -short): starting
// three Kafka JVMs takes 30-60 s on the 2-core CI machine. CI runs it.
const clusterEnv = "FERRY_TEST_CLUSTER"

// kafkaCluster is a 3-node KRaft cluster of one test's own
// (kafkatest.StartCluster: a spare started with the test binary when one
// is ready).
type kafkaCluster struct {
	t     testing.TB
	addrs string
	b     *kafkatest.Broker
}

// clusterTests are the tests that start a cluster, for TestMain's spares
// (none when clusterEnv=0).
func clusterTests() []string {
	if os.Getenv(clusterEnv) == "0" || testing.Short() {
		return nil
	}
	return []string{"TestThreeBrokersKillOne"}
}

func startCluster(t testing.TB) *kafkaCluster {
	t.Helper()
	start := time.Now()
	b := kafkatest.StartCluster(t, 3)
	t.Logf("3-broker cluster up at %s in %s", b.Addr, time.Since(start).Round(100*time.Millisecond))
	return &kafkaCluster{t: t, addrs: b.Addr, b: b}
}

func (c *kafkaCluster) run(args ...string) string {
	c.t.Helper()
	return c.b.Run(args...)
}

// leader returns the node id leading partition 0 of topic and its replicas.
func (c *kafkaCluster) leader(topic string) (int, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := kafkatest.Client(c.addrs)
	defer kafkatest.CloseClient(client)
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		c.t.Fatalf("metadata %s: %v", topic, err)
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if p.ID == 0 {
				return p.Leader.ID, len(p.Replicas)
			}
		}
	}
	c.t.Fatalf("topic %s has no partition 0", topic)
	return 0, 0
}

// TestThreeBrokersKillOne (issue 9, scenario 9): three Kafka brokers,
// topics with replication factor 3 and min.insync.replicas=2, acks=all; the
// leader of the topics' partition is killed (SIGKILL) mid-stream: no
// acknowledged message is lost. Skipped with -short or FERRY_TEST_CLUSTER=0.
func TestThreeBrokersKillOne(t *testing.T) {
	if os.Getenv(clusterEnv) == "0" || testing.Short() {
		t.Skipf("skipped (-short or %s=0): starts a 3-broker Kafka cluster, 30-60 s, ~1 GiB", clusterEnv)
	}
	kafkatest.Brokers(t) // the harness (scripts/kafka.sh, its jars) is needed
	kc := startCluster(t)
	cfg := testConfig(kc.addrs)
	cfg.Kafka.ReplicationFactor = 3
	cfg.Kafka.Acks = "all"
	cfg.Kafka.AckTimeout = 10 * time.Second
	b := startBridge(t, cfg)

	clients, perClient := 5, scaled(4000, 1000)
	topics := topicsFor("cluster", clients)
	// Create the topics through the bridge first so the leader is known. The
	// warm-up record is "0", the stream's first sequence number: verifyAcked
	// counts it as one duplicate per topic.
	for i, topic := range topics {
		c := connectPaho(t, b.MQTTAddr(), fmt.Sprintf("warm%d-%s", i, randHex(3)))
		if tok := c.Publish(topic, 1, false, "0"); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("warm-up publish: %v", tok.Error())
		}
		c.Disconnect(50)
	}
	leader, replicas := kc.leader(kafkaName(t, topics[0]))
	minISR := topicConfig(t, kafkatest.Addrs(kc.addrs), kafkaName(t, topics[0]), "min.insync.replicas")
	t.Logf("topic %s: %d replicas, min.insync.replicas=%s, leader node %d", kafkaName(t, topics[0]), replicas, minISR, leader)
	if replicas != 3 || minISR != "2" {
		t.Fatalf("want 3 replicas and min.insync.replicas=2, got %d and %s", replicas, minISR)
	}

	f := startFleet(t, b.MQTTAddr, "cl-"+randHex(2), topics, perClient, 100, 4*time.Minute)
	waitFor(t, 30*time.Second, "some records produced", func() bool {
		return metricValue(t, b, "ferry_kafka_records_produced_total", nil) > float64(clients*perClient/5)
	})
	killedAt := metricValue(t, b, "ferry_kafka_records_produced_total", nil)
	kc.run("kill", fmt.Sprint(leader))
	t.Logf("killed node %d (leader) after %.0f records", leader, killedAt)
	f.wait(t)
	acked, records, dups := verifyAcked(t, kc.addrs, f.ledger)
	newLeader, _ := kc.leader(kafkaName(t, topics[0]))
	t.Logf("3 brokers, leader killed: %d clients x %d QoS1 msgs: acked %d, records %d, duplicates %d (incl. %d warm-up), reconnects %d, new leader node %d",
		clients, perClient, acked, records, dups, clients, f.reconnects.Load(), newLeader)
	if acked != clients*perClient {
		t.Fatalf("acked %d, want %d", acked, clients*perClient)
	}
}
