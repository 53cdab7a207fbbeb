// Package charts draws probe results as PNG figures (pure Go, gonum/plot):
// latency CDFs and p50/p99 over time for a run, throughput and latency
// against clients (one line per payload size) for a sweep.
package charts

import (
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ferry-bridge/ferry/probe"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// ErrNoData means there was nothing to draw.
var ErrNoData = errors.New("charts: no data to plot")

// Figure size.
const (
	width  = 8 * vg.Inch
	height = 5 * vg.Inch
)

// minLogMs is where latencies of 0 (clamped negatives) are drawn on a log
// axis: its left edge, said in the axis label.
const minLogMs = 0.001

// plural is "1 message", "2 messages".
func plural(n int64, word string) string { return probe.Plural(n, word) }

// WriteRun writes, for each available metric of res, <direction>-<metric>-cdf.png
// (cumulative distribution of latency) and <direction>-<metric>-time.png
// (p50 and p99 over time, with throughput). It returns the paths written.
func WriteRun(dir string, res *probe.Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	var paths []string
	for _, row := range res.Rows {
		l := res.Latency(row.Metric)
		if l == nil {
			continue
		}
		base := filepath.Join(dir, fmt.Sprintf("%s-%s", res.Direction, row.Metric))
		title := fmt.Sprintf("%s %s latency: %s, QoS %d, %d B, %s, %s",
			res.Direction, row.Metric, plural(row.Counts.Received, "message"), row.QoS, row.PayloadBytes,
			plural(int64(row.Clients), "client"), plural(int64(row.Subscribers), "subscriber"))
		// append is LogAppendTime - send time, both whole ms: whole-ms data.
		wholeMs := row.Metric == probe.MetricAppend
		var clamped float64
		if n := l.Count(); n > 0 {
			clamped = float64(row.Negative) / float64(n)
		}
		if err := cdf(base+"-cdf.png", title, l.CDF(), wholeMs, clamped); err != nil {
			return paths, err
		}
		paths = append(paths, base+"-cdf.png")
		if tl := res.Timeline(row.Metric); tl != nil {
			if err := timeline(base+"-time.png", title, tl.Buckets()); err != nil {
				return paths, err
			}
			paths = append(paths, base+"-time.png")
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no metric has samples", ErrNoData)
	}
	return paths, nil
}

// cdfSteps draws an empirical CDF as what it is, a step function: at each
// latency the curve rises vertically from the previous fraction to its
// own, and stays flat until the next latency. floor replaces latencies
// below it (0 on a log axis). A quantile's dot at (latency, q) lies on a
// vertical segment.
func cdfSteps(pts []stats.CDFPoint, floor float64) plotter.XYs {
	xys := make(plotter.XYs, 0, 2*len(pts))
	prev := 0.0
	for _, pt := range pts {
		x := math.Max(pt.Ms, floor)
		xys = append(xys, plotter.XY{X: x, Y: prev}, plotter.XY{X: x, Y: pt.Fraction})
		prev = pt.Fraction
	}
	return xys
}

// cdf draws the distribution: whole-ms data on a linear axis from 0 (each
// step a whole millisecond), finer data on a log axis where the clamped
// share (samples below 0, counted as 0) is drawn at the left edge and
// stated in the axis label.
func cdf(path, title string, pts []stats.CDFPoint, wholeMs bool, clamped float64) error {
	if len(pts) == 0 {
		return fmt.Errorf("%w: %s", ErrNoData, path)
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "fraction of messages at or below (CDF)"
	p.Y.Min, p.Y.Max = 0, 1.0
	floor := minLogMs
	if wholeMs {
		floor = 0
		p.X.Label.Text = "latency (ms; whole milliseconds, as Kafka's LogAppendTime)"
		p.X.Min = 0
		p.X.Max = math.Max(1, pts[len(pts)-1].Ms+1)
	} else {
		p.X.Label.Text = "latency (ms, log scale; microsecond resolution)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	xys := cdfSteps(pts, floor)
	if !wholeMs && len(pts) == 1 { // a single value: give the log axis a width
		xys = append(plotter.XYs{{X: xys[0].X / 2, Y: 0}}, xys...)
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("charts: %s: %w", path, err)
	}
	line.Color = plotutil.Color(0)
	line.Width = vg.Points(1.5)
	p.Add(plotter.NewGrid(), line)
	for _, q := range []float64{0.5, 0.99} {
		ms := quantileOf(pts, q)
		mark, err := plotter.NewScatter(plotter.XYs{{X: math.Max(ms, floor), Y: q}})
		if err != nil {
			return fmt.Errorf("charts: %s: %w", path, err)
		}
		mark.GlyphStyle.Shape = draw.CircleGlyph{}
		mark.GlyphStyle.Radius = vg.Points(3)
		p.Add(mark)
		p.Legend.Add(fmt.Sprintf("p%g = %.3f ms", q*100, ms), mark)
	}
	if note := clampedNote(clamped, wholeMs); note != "" {
		// A legend line of its own: an axis label's second line narrows the plot.
		p.Legend.Add(note)
	}
	// Bottom right: below the curve, which is near 1 at the right.
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Points(10)
	return save(p, path)
}

// clampedNote says which share of the samples was below 0 (send and
// receive clocks differ by less than their resolution) and where the plot
// draws them; "" when none.
func clampedNote(clamped float64, wholeMs bool) string {
	if clamped <= 0 {
		return ""
	}
	where := "at 0"
	if !wholeMs {
		where = fmt.Sprintf("at the left edge, %g ms", minLogMs)
	}
	return fmt.Sprintf("%.1f%% of the samples were < 0 (clocks), counted as 0: drawn %s", 100*clamped, where)
}

// quantileOf is the smallest latency whose cumulative fraction reaches q.
func quantileOf(pts []stats.CDFPoint, q float64) float64 {
	for _, pt := range pts {
		if pt.Fraction >= q {
			return pt.Ms
		}
	}
	return pts[len(pts)-1].Ms
}

// legendRoom is how much higher than the data the latency axis reaches, so
// that the legend at the top sits above every line.
const legendRoom = 1.4

// timelineSeries are the plotted lines: p50 and p99 of every interval with
// arrivals, at its middle, and the arrival rate per second of every
// interval except the last, which the run ended inside (drawn, it would
// fall towards 0).
func timelineSeries(bs []stats.Bucket) (p50, p99, rate plotter.XYs) {
	for i, b := range bs {
		x := (b.Start + b.Width/2).Seconds()
		if i < len(bs)-1 || len(bs) == 1 {
			rate = append(rate, plotter.XY{X: x, Y: float64(b.Count) / b.Width.Seconds()})
		}
		if b.Count == 0 {
			continue
		}
		p50 = append(p50, plotter.XY{X: x, Y: b.P50})
		p99 = append(p99, plotter.XY{X: x, Y: b.P99})
	}
	return p50, p99, rate
}

func timeline(path, title string, bs []stats.Bucket) error {
	if len(bs) == 0 {
		return fmt.Errorf("%w: %s", ErrNoData, path)
	}
	width := bs[0].Width
	p50, p99, thr := timelineSeries(bs)
	lat := plot.New()
	lat.Title.Text = title
	lat.X.Label.Text = fmt.Sprintf("time since start (s), one point per %v", width)
	lat.Y.Label.Text = "latency (ms)"
	if err := plotutil.AddLinePoints(lat, fmt.Sprintf("p50 per %v", width), p50, fmt.Sprintf("p99 per %v", width), p99); err != nil {
		return fmt.Errorf("charts: %s: %w", path, err)
	}
	lat.Add(plotter.NewGrid())
	lat.Y.Min = 0
	var top float64
	for _, xy := range p99 {
		top = math.Max(top, xy.Y)
	}
	lat.Y.Max = math.Max(top*legendRoom, 0.001)
	lat.Legend.Top = true

	rate := plot.New()
	rate.X.Label.Text = fmt.Sprintf("time since start (s); the last, partial %v is left out", width)
	rate.Y.Label.Text = "received (msg/s)"
	if err := plotutil.AddLines(rate, fmt.Sprintf("arrivals per second, per %v", width), thr); err != nil {
		return fmt.Errorf("charts: %s: %w", path, err)
	}
	rate.Add(plotter.NewGrid())
	rate.Y.Min = 0
	var peak float64
	for _, xy := range thr {
		peak = math.Max(peak, xy.Y)
	}
	rate.Y.Max = math.Max(peak*legendRoom, 1)
	rate.Legend.Top = true
	rate.X.Min, rate.X.Max = lat.X.Min, lat.X.Max
	return saveStack(path, lat, rate)
}

// WriteSweep writes sweep-throughput.png (received msg/s and bit/s against
// clients) and sweep-latency.png (average and p99 latency against
// clients), one line per payload size, knees marked. It returns the paths.
func WriteSweep(dir string, r *probe.SweepResult) ([]string, error) {
	if len(r.Points) == 0 {
		return nil, fmt.Errorf("%w: sweep has no points", ErrNoData)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	byPayload := map[int][]probe.SweepPoint{}
	for _, p := range r.Points {
		byPayload[p.PayloadBytes] = append(byPayload[p.PayloadBytes], p)
	}
	var payloads []int
	for k := range byPayload {
		payloads = append(payloads, k)
	}
	slices.Sort(payloads)
	series := func(f func(probe.SweepPoint) float64) []any {
		var out []any
		for _, pl := range payloads {
			pts := byPayload[pl]
			slices.SortFunc(pts, func(a, b probe.SweepPoint) int { return a.Clients - b.Clients })
			xys := make(plotter.XYs, len(pts))
			for i, p := range pts {
				xys[i] = plotter.XY{X: float64(p.Clients), Y: f(p)}
			}
			out = append(out, fmt.Sprintf("%d B payload", pl), xys)
		}
		return out
	}
	sc := r.Config
	title := fmt.Sprintf("sweep %s: one message per %v per client, QoS %d, %d repeat(s)", sc.Direction, sc.Interval, sc.Base.QoS, sc.Repeat)
	knees := kneeNote(r.Knees)

	msgs := newXY(title, "clients (publishers)", "received throughput (msg/s)")
	if err := plotutil.AddLinePoints(msgs, series(func(p probe.SweepPoint) float64 { return p.ThroughputMsgS })...); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	bits := newXY(knees, "clients (publishers)", "received throughput (payload bit/s)")
	if err := plotutil.AddLinePoints(bits, series(func(p probe.SweepPoint) float64 { return p.ThroughputBitS })...); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	thrPath := filepath.Join(dir, "sweep-throughput.png")
	if err := saveStack(thrPath, msgs, bits); err != nil {
		return nil, err
	}

	avg := newXY(title, "clients (publishers)", "average e2e latency (ms)")
	if err := plotutil.AddLinePoints(avg, series(func(p probe.SweepPoint) float64 { return p.AvgMs })...); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	p99 := newXY(knees, "clients (publishers)", "p99 e2e latency (ms)")
	if err := plotutil.AddLinePoints(p99, series(func(p probe.SweepPoint) float64 { return p.P99Ms })...); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	latPath := filepath.Join(dir, "sweep-latency.png")
	if err := saveStack(latPath, avg, p99); err != nil {
		return []string{thrPath}, err
	}
	return []string{thrPath, latPath}, nil
}

func kneeNote(knees []probe.Knee) string {
	var parts []string
	for _, k := range knees {
		if k.Found {
			parts = append(parts, fmt.Sprintf("%d B: knee at %d clients", k.PayloadBytes, k.Clients))
		} else {
			parts = append(parts, fmt.Sprintf("%d B: no knee up to %d clients", k.PayloadBytes, k.Clients))
		}
	}
	return strings.Join(parts, "; ")
}

func newXY(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

func save(p *plot.Plot, path string) error {
	img := vgimgNew(width, height)
	p.Draw(draw.New(img))
	return writePNG(path, img)
}

// saveStack draws plots one above the other in one PNG.
func saveStack(path string, plots ...*plot.Plot) error {
	img := vgimgNew(width, height*vg.Length(len(plots))*0.6)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: vg.Millimeter}
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	return writePNG(path, img)
}

func vgimgNew(w, h vg.Length) *vgimg.Canvas { return vgimg.New(w, h) }

func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	// BestSpeed: flat colours compress well anyway, and the default level
	// costs several times the drawing.
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(f, img.Image()); err != nil {
		f.Close()
		return fmt.Errorf("charts: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("charts: close %s: %w", path, err)
	}
	return nil
}
