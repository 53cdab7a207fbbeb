package ringbuffer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferry-bridge/ferry/ringbuffer"
)

func Example() {
	r, err := ringbuffer.New[string](4)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Producers: TryPush reports full, Push waits for space, PushEvict drops
	// the oldest and hands it back.
	for _, m := range []string{"a", "b", "c", "d"} {
		_ = r.Push(ctx, m)
	}
	fmt.Println("full:", !r.TryPush("e"))
	if old, evicted, _ := r.PushEvict("e"); evicted {
		fmt.Println("evicted:", old)
	}
	r.Close() // no more pushes; what is inside can still be drained

	// Consumer: batches until the ring is closed and empty.
	batch := make([]string, 3)
	for {
		n, err := r.PopBatch(ctx, batch)
		if errors.Is(err, ringbuffer.ErrClosed) {
			break
		}
		fmt.Println("batch:", batch[:n])
	}
	// Output:
	// full: true
	// evicted: a
	// batch: [b c d]
	// batch: [e]
}
