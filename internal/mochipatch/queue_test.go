package mochipatch

import (
	"runtime"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// TestOnlyAConnectionGetsAWriteQueue: a client without a connection (the
// stand-in Ferry's session engine makes for a session resumed from Kafka,
// an inline client) has no queue of packets to write; a connected one has
// its MaximumClientWritesPending slots. Upstream made the queue for every
// client: 8 KiB at 1,024 slots, twice per session in a reconnect storm
// (the stand-in, then the connection), a fifth of an instance's
// allocated bytes.
func TestOnlyAConnectionGetsAWriteQueue(t *testing.T) {
	s := quietServer()
	s.Options.Capabilities.MaximumClientWritesPending = 1024
	const n = 200
	keep := make([]*mqtt.Client, 0, 2*n)
	perClient := func(conn func() *captureConn) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if c := conn(); c != nil {
				keep = append(keep, s.NewClient(c, "test", "c", false))
			} else {
				keep = append(keep, s.NewClient(nil, "", "c", false))
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	connected := perClient(func() *captureConn { return &captureConn{} })
	standIn := perClient(func() *captureConn { return nil })
	t.Logf("bytes allocated per client: connected %d, without a connection %d", connected, standIn)
	if connected < 8<<10 {
		t.Fatalf("a connected client allocates %d bytes: the measure does not see its 8 KiB queue", connected)
	}
	if standIn >= 4<<10 {
		t.Errorf("a client without a connection allocates %d bytes, want < 4 KiB (no write queue)", standIn)
	}
	runtime.KeepAlive(keep)
}
