//go:build race

package ringbuffer

// stressItems is the per-producer item count of the stress test; the race
// detector slows the ring by an order of magnitude, so it runs a fifth.
const stressItems = 200_000
