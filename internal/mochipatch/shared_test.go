package mochipatch

import (
	"fmt"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestSharedSubscribersGatheredWithoutACopy: a topic's subscribers are
// gathered with its shared subscriptions read in place (upstream copied
// every group's subscriptions first, on every publish to the topic: 5% of
// the objects allocated in a shared-subscription benchmark), and gathered
// the same: every member of every group, under its filter.
func TestSharedSubscribersGatheredWithoutACopy(t *testing.T) {
	x := mqtt.NewTopicsIndex()
	for g := range 2 {
		for m := range 4 {
			x.Subscribe(fmt.Sprintf("m%d-%d", g, m), packets.Subscription{Filter: fmt.Sprintf("$share/g%d/fleet/+", g), Qos: 1})
		}
	}
	x.Subscribe("plain", packets.Subscription{Filter: "fleet/#"})
	subs := x.Subscribers("fleet/a")
	if len(subs.Shared) != 2 || len(subs.Subscriptions) != 1 {
		t.Fatalf("gathered %d groups and %d subscriptions, want 2 and 1", len(subs.Shared), len(subs.Subscriptions))
	}
	for g := range 2 {
		f := fmt.Sprintf("$share/g%d/fleet/+", g)
		for m := range 4 {
			if sub, ok := subs.Shared[f][fmt.Sprintf("m%d-%d", g, m)]; !ok || sub.Qos != 1 {
				t.Errorf("group %s member %d: %+v, %v", f, m, sub, ok)
			}
		}
	}
	// Upstream: 18 allocations here, 7 of them the copy (each group's
	// map and the map holding them); 11 with the Subscribers, its maps
	// and what they hold.
	if n := testing.AllocsPerRun(200, func() { x.Subscribers("fleet/a") }); n > 11 {
		t.Errorf("%.0f allocations gathering the subscribers, want at most 11 (upstream copied each group first: 18)", n)
	}
}
