//go:build !race

package ringbuffer

// stressItems is the per-producer item count of the stress test.
const stressItems = 1_000_000
