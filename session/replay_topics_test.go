package session

import (
	"context"
	"testing"
	"time"
)

// TestTopicListerShares: replays share a listing young enough for them; a
// listing requested before the time a caller needs is not reused.
func TestTopicListerShares(t *testing.T) {
	calls := 0
	l := &topicLister{maxAge: time.Hour, list: func(context.Context) ([]string, error) {
		calls++
		return []string{"t"}, nil
	}}
	ctx := context.Background()
	for range 3 {
		if _, err := l.recent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("3 first passes within maxAge listed the topics %d times, want 1", calls)
	}
	live := time.Now()
	if _, err := l.since(ctx, live); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("a last pass whose subscriptions went live after the listing reused it (%d listings, want 2)", calls)
	}
	if _, err := l.since(ctx, live); err != nil || calls != 2 {
		t.Fatalf("a listing requested after the subscriptions went live was not reused (%d listings, want 2, err %v)", calls, err)
	}
}
