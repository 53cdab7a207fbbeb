package probe

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Comparison is one figure of two result files: B / A.
type Comparison struct {
	// Key names the row: "direction/metric" for run CSVs,
	// "direction/payload B/clients" for sweep CSVs.
	Key    string
	Column string
	A, B   float64
	// Ratio is B / A; NaN when A is 0 (and B is not), 1 when both are 0.
	Ratio float64
}

// CompareResult is the outcome of Compare.
type CompareResult struct {
	Rows []Comparison
	// OnlyA and OnlyB list row keys found in one file only.
	OnlyA, OnlyB []string
}

// compareKeys are the identifying columns of the two CSV kinds; compareSkip
// are configuration columns, equal by design or not worth a ratio.
var (
	runKey      = []string{"direction", "metric"}
	sweepKey    = []string{"direction", "payload_bytes", "clients"}
	compareSkip = map[string]bool{
		"qos": true, "payload_bytes": true, "rate": true, "clients": true, "subscribers": true, "warmup": true,
		"interval_ms": true, "offered_msg_s": true, "repeats": true,
	}
)

type csvTable struct {
	header []string
	key    []int
	rows   map[string][]string
	order  []string
}

func readTable(r io.Reader, name string) (*csvTable, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	if len(recs) < 1 {
		return nil, fmt.Errorf("%w: %s: empty", ErrConfig, name)
	}
	t := &csvTable{header: recs[0], rows: map[string][]string{}}
	keyCols := runKey
	if slices.Contains(t.header, "knee") {
		keyCols = sweepKey
	}
	for _, k := range keyCols {
		i := slices.Index(t.header, k)
		if i < 0 {
			return nil, fmt.Errorf("%w: %s: no %q column: not a probe CSV", ErrConfig, name, k)
		}
		t.key = append(t.key, i)
	}
	for _, rec := range recs[1:] {
		parts := make([]string, len(t.key))
		for j, i := range t.key {
			parts[j] = rec[i]
		}
		if len(t.key) == 3 {
			parts[1] += " B"
			parts[2] += " clients"
		}
		k := strings.Join(parts, "/")
		if _, dup := t.rows[k]; !dup {
			t.order = append(t.order, k)
		}
		t.rows[k] = rec
	}
	return t, nil
}

// Compare reads two probe CSVs of the same kind (run or sweep) and returns
// B / A for every numeric figure of every row found in both.
func Compare(a, b io.Reader) (*CompareResult, error) {
	ta, err := readTable(a, "A")
	if err != nil {
		return nil, err
	}
	tb, err := readTable(b, "B")
	if err != nil {
		return nil, err
	}
	if len(ta.key) != len(tb.key) {
		return nil, fmt.Errorf("%w: A and B are not the same kind of probe CSV (run vs sweep)", ErrConfig)
	}
	res := &CompareResult{}
	for _, k := range ta.order {
		ra := ta.rows[k]
		rb, ok := tb.rows[k]
		if !ok {
			res.OnlyA = append(res.OnlyA, k)
			continue
		}
		for i, col := range ta.header {
			if slices.Contains(ta.key, i) || compareSkip[col] {
				continue
			}
			j := slices.Index(tb.header, col)
			if j < 0 || i >= len(ra) || j >= len(rb) {
				continue
			}
			va, errA := strconv.ParseFloat(ra[i], 64)
			vb, errB := strconv.ParseFloat(rb[j], 64)
			if errA != nil || errB != nil {
				continue // empty (unavailable) or text
			}
			res.Rows = append(res.Rows, Comparison{Key: k, Column: col, A: va, B: vb, Ratio: ratio(va, vb)})
		}
	}
	for _, k := range tb.order {
		if _, ok := ta.rows[k]; !ok {
			res.OnlyB = append(res.OnlyB, k)
		}
	}
	return res, nil
}

func ratio(a, b float64) float64 {
	switch {
	case a == 0 && b == 0:
		return 1
	case a == 0:
		return math.NaN()
	}
	return b / a
}

// WriteComparison prints the ratios for humans: one line per figure.
func WriteComparison(w io.Writer, r *CompareResult, nameA, nameB string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "ratio = B / A   (A = %s, B = %s; latency ratio > 1: B slower; throughput ratio > 1: B faster)\n\n", nameA, nameB)
	fmt.Fprintf(&b, "%-34s %-22s %14s %14s %10s\n", "row", "figure", "A", "B", "ratio")
	last := ""
	for _, c := range r.Rows {
		key := c.Key
		if key == last {
			key = ""
		}
		last = c.Key
		rs := "n/a"
		if !math.IsNaN(c.Ratio) {
			rs = strconv.FormatFloat(c.Ratio, 'f', 3, 64)
		}
		fmt.Fprintf(&b, "%-34s %-22s %14s %14s %10s\n", key, c.Column,
			strconv.FormatFloat(c.A, 'f', -1, 64), strconv.FormatFloat(c.B, 'f', -1, 64), rs)
	}
	if len(r.OnlyA) > 0 {
		fmt.Fprintf(&b, "\nonly in A: %s\n", strings.Join(r.OnlyA, ", "))
	}
	if len(r.OnlyB) > 0 {
		fmt.Fprintf(&b, "\nonly in B: %s\n", strings.Join(r.OnlyB, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
