package probe

import "testing"

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
