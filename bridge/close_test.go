package bridge

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestCloseReleasesKafkaTransport: after Close, nothing of the bridge's
// kafka-go transport runs on. Its connection pool keeps a goroutine that
// fetches the whole cluster's metadata every 3 s; left behind by every
// closed bridge, hundreds of them (one per bridge a test run starts,
// against a Kafka holding thousands of topics) took a clean-clone test run
// to an 11 GB test binary and most of both cores.
func TestCloseReleasesKafkaTransport(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	before := metadataRefreshers()
	b := startBridge(t, testConfig(brokers))
	c := connectPaho(t, b.MQTTAddr(), "close-"+randHex(3))
	if tok := c.Publish(uniqueTopic("close"), 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	if n := metadataRefreshers(); n <= before {
		t.Fatalf("%d kafka-go metadata refreshers with a bridge running, %d before: the test does not see the bridge's", n, before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the bridge's kafka-go metadata refresher gone", func() bool { return metadataRefreshers() <= before })
}

// metadataRefreshers counts the goroutines of open kafka-go connection pools.
func metadataRefreshers() int {
	buf := make([]byte, 64<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "kafka-go.(*connPool).discover")
}
