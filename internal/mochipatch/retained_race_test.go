package mochipatch

import (
	"fmt"
	"sync"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRetainedScanWhileRetaining: a SUBSCRIBE's scan for the retained
// messages its filter matches runs while retained messages are set and
// cleared (Ferry's retained table applies them from Kafka on its own
// goroutine). Upstream read a topic's retained path without the lock its
// writer holds: a data race the race detector reports (run with -race).
func TestRetainedScanWhileRetaining(t *testing.T) {
	x := mqtt.NewTopicsIndex()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 2000 {
			topic := fmt.Sprintf("a/b/%d", i%16)
			payload := []byte("x")
			if i%3 == 0 {
				payload = nil // a clear
			}
			x.RetainMessage(packets.Packet{TopicName: topic, Payload: payload})
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 2000 {
			for _, f := range []string{"a/#", "a/+/+", fmt.Sprintf("a/b/%d", i%16), "a/b/#"} {
				_ = x.Messages(f)
			}
		}
	}()
	wg.Wait()
}
