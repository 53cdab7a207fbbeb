// Package kafkaclient holds what the bridge and the test helpers share about
// segmentio/kafka-go clients: closing a client's transport.
package kafkaclient

import "github.com/segmentio/kafka-go"

// CloseIdle closes c's transport (a *kafka.Transport; other RoundTrippers
// are left alone). A kafka-go transport left open keeps its connection
// pools and a goroutine that fetches the whole cluster's metadata every few
// seconds. c may be used again (a new pool is opened).
func CloseIdle(c *kafka.Client) {
	if t, ok := c.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}
