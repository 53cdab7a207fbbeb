package probe

import (
	"strings"
	"testing"
)

// TestAppendLatencyWholeMs: append is computed as the reference test did,
// both times in whole milliseconds: a record sent at 1000.9 ms and appended
// in broker millisecond 1001 counts 1 ms (not 0.1 ms), one appended in the
// same millisecond counts 0, and the result is always whole ms.
func TestAppendLatencyWholeMs(t *testing.T) {
	for _, tc := range []struct {
		appendMs, sentNs, want int64
	}{
		{1001, 1000_900_000, 1_000_000},
		{1000, 1000_900_000, 0},
		{1003, 1000_000_001, 3_000_000},
		{999, 1000_100_000, -1_000_000}, // clocks disagree: negative, clamped and counted by the histogram
	} {
		if got := appendLatencyNs(tc.appendMs, tc.sentNs); got != tc.want {
			t.Errorf("append %d ms, sent %d ns: %d ns, want %d", tc.appendMs, tc.sentNs, got, tc.want)
		}
	}
}

// TestCPUVerdict: the self-check names the probe as the limit when it used
// most of the machine, or most of the busy CPU of a saturated machine, and
// never when the system under test took the CPU.
func TestCPUVerdict(t *testing.T) {
	for _, tc := range []struct {
		cores, machine, share float64
		want                  string
	}{
		{1.6, 1.9, 0.85, "PROBE IS THE LIMIT"},  // paho-era: 1.09+ of 2 cores
		{0.9, 1.95, 0.55, "PROBE IS THE LIMIT"}, // most of a saturated machine
		{0.8, 1.9, 0.4, "may be part of the limit"},
		{0.13, 1.99, 0.07, "system under test"},  // the raw engine against Ferry
		{0.3, 1.2, 0.25, "ok, the probe is not"}, // headroom
		{0.3, -1, 0, "ok, the probe is not"},     // machine CPU unknown
	} {
		if got := cpuVerdict(tc.cores, tc.machine, tc.share, 2); !strings.Contains(got, tc.want) {
			t.Errorf("cores %.2f machine %.2f share %.2f: %q, want %q", tc.cores, tc.machine, tc.share, got, tc.want)
		}
	}
}
