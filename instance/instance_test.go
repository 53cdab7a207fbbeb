package instance

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// TestInstanceCheckCloseWithoutRun: Close before (or instead of) Run
// returns at once, a later Run does nothing, and Close can be repeated.
func TestInstanceCheckCloseWithoutRun(t *testing.T) {
	c, err := New(Config{ID: "closed-" + testhelp.RandHex(3), Brokers: []string{"127.0.0.1:1"}},
		Deps{Log: testhelp.Logger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.Run(ctx) // returns at once: the nil Kafka client is never touched
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
