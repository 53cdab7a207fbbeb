package bridge

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

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
	b := startBridge(t, testConfig(brokers))
	c := connectPaho(t, b.MQTTAddr(), "close-"+randHex(3))
	if tok := c.Publish(uniqueTopic("close"), 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	tr, ok := b.kclient.Transport.(*kafka.Transport)
	if !ok {
		t.Fatalf("the bridge's kafka-go transport is a %T", b.kclient.Transport)
	}
	// Only this bridge's pools count: other tests' bridges start and stop
	// their own while this one runs.
	pools := transportPools(tr)
	if n := metadataRefreshers(pools); len(pools) == 0 || n == 0 {
		t.Fatalf("%d kafka-go metadata refreshers of the bridge's %d connection pools while it runs: the test does not see them", n, len(pools))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the bridge's kafka-go metadata refreshers gone", func() bool { return metadataRefreshers(pools) == 0 })
}

// transportPools returns the addresses of a kafka-go transport's
// connection pools (an unexported map; read, never written).
func transportPools(tr *kafka.Transport) []uintptr {
	v := reflect.ValueOf(tr).Elem().FieldByName("pools")
	var out []uintptr
	for it := v.MapRange(); it.Next(); {
		out = append(out, it.Value().Pointer())
	}
	return out
}

// metadataRefreshers counts the goroutines still running the metadata
// refresh of one of pools: kafka-go's (*connPool).discover, whose
// receiver is the first argument in a goroutine's trace.
func metadataRefreshers(pools []uintptr) int {
	buf := make([]byte, 64<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	n := 0
	for _, p := range pools {
		n += strings.Count(stacks, fmt.Sprintf("kafka-go.(*connPool).discover(0x%x", p))
	}
	return n
}
