package bridge

import (
	"errors"
	"testing"

	"github.com/ferry-bridge/ferry/topicmap"
)

// The route cache answers a repeated topic from its entry (the same key
// bytes, no new mapping) and any other topic as the map does: alternating
// topics never get each other's route, and an unmappable topic's error is
// not kept in place of the last good route.
func TestPubCache(t *testing.T) {
	tm, err := topicmap.New(topicmap.Config{Exclude: []string{"private/#"}})
	if err != nil {
		t.Fatal(err)
	}
	var c pubCache
	first, err := c.forward(tm, "/tacos/pub/lf")
	if err != nil || first.Topic != "_tacos_pub_lf" {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, _ := c.forward(tm, "/tacos/pub/lf")
	if &again.Key[0] != &first.Key[0] {
		t.Error("a repeated topic was mapped again instead of answered from the cache")
	}
	for i, topic := range []string{"/tacos/sub/le", "/tacos/pub/lf", "/tacos/sub/le"} {
		want, _ := tm.Forward(topic)
		got, err := c.forward(tm, topic)
		if err != nil || got.Topic != want.Topic || string(got.Key) != topic {
			t.Fatalf("call %d, %s: %+v, %v; want %+v", i, topic, got, err, want)
		}
	}
	if _, err := c.forward(tm, "private/x"); !errors.Is(err, topicmap.ErrExcluded) {
		t.Fatalf("excluded topic: %v", err)
	}
	if _, err := c.forward(tm, "private/x"); !errors.Is(err, topicmap.ErrExcluded) {
		t.Fatalf("excluded topic, asked again: %v", err)
	}
	if got, err := c.forward(tm, "/tacos/sub/le"); err != nil || got.Topic != "_tacos_sub_le" {
		t.Fatalf("after an error: %+v, %v", got, err)
	}
}
