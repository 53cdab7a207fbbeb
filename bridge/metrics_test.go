package bridge

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReasonMetricsStartAtZero: right after start every documented reason
// of ferry_mqtt_nacks_total, ferry_dropped_total and
// ferry_reverse_skipped_total is a series at 0 (they appeared only once
// counted, so an alert on them saw nothing), and each HELP text names every
// reason.
func TestReasonMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, func() float64 { return 0 }, func() float64 { return 8 }); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"ferry_mqtt_nacks_total":      nackReasons,
		"ferry_dropped_total":         dropReasons,
		"ferry_reverse_skipped_total": reverseSkipReasons,
	}
	for _, mf := range mfs {
		values, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		delete(want, mf.GetName())
		got := map[string]float64{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		for _, v := range values {
			if val, ok := got[v]; !ok || val != 0 {
				t.Errorf("%s{reason=%q} at start: present %v, value %v; want a series at 0", mf.GetName(), v, ok, val)
			}
			if !strings.Contains(mf.GetHelp(), v) {
				t.Errorf("%s HELP %q does not name reason %s", mf.GetName(), mf.GetHelp(), v)
			}
		}
	}
	for name := range want {
		t.Errorf("%s has no series at start", name)
	}
}

// TestReasonLabelsKnown: every reason the code counts is one of the
// declared (and so initialised and documented) values.
func TestReasonLabelsKnown(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile(`(drops|nacks|reverseSkipped)\.WithLabelValues\("([a-z_]+)"\)`)
	nackRet := regexp.MustCompile(`(?s)func nackReason\(.*?\n}\n`)
	ret := regexp.MustCompile(`return "([a-z_]+)"`)
	lists := map[string][]string{"drops": dropReasons, "nacks": nackReasons, "reverseSkipped": reverseSkipReasons}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllStringSubmatch(string(src), -1) {
			seen++
			if !slices.Contains(lists[m[1]], m[2]) {
				t.Errorf("%s: %s counts reason %q, not in its declared list %v", f, m[1], m[2], lists[m[1]])
			}
		}
		if body := nackRet.FindString(string(src)); body != "" {
			for _, m := range ret.FindAllStringSubmatch(body, -1) {
				seen++
				if !slices.Contains(nackReasons, m[1]) {
					t.Errorf("nackReason returns %q, not in nackReasons %v", m[1], nackReasons)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d reason uses: the pattern no longer matches the code", seen)
	}
}
