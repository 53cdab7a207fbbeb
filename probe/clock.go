package probe

import "time"

// clock gives Unix-nanosecond timestamps that advance with the monotonic
// clock: wall time is read once at the start, so an NTP step during a run
// cannot distort a latency. Send and receive times of one run come from the
// same clock; only the append metric compares with another clock (the Kafka
// broker's wall clock, in whole milliseconds).
type clock struct {
	base   time.Time
	baseNs int64
}

func newClock() clock {
	b := time.Now()
	return clock{base: b, baseNs: b.UnixNano()}
}

// now returns the current time in Unix ns.
func (c clock) now() int64 { return c.baseNs + int64(time.Since(c.base)) }

// sleepUntil sleeps until the clock reads ns (or returns at once if past).
func (c clock) sleepUntil(ns int64) {
	if d := time.Duration(ns - c.now()); d > 0 {
		time.Sleep(d)
	}
}

// describe is the self-check line about the clock.
func (c clock) describe() string {
	return "clock: time.Now monotonic reading, anchored to the wall clock once at start (" +
		c.base.UTC().Format(time.RFC3339Nano) + "); send and receive times share it"
}
