// Package idlegc gives the system back the memory a burst of work left
// behind once the process has gone quiet.
//
// Ferry runs with a high garbage collector target (runtime.gc_percent 400:
// the forward path's throughput), so the heap may hold up to four times its
// live bytes in garbage. A busy process recycles that garbage; a process
// that goes quiet after a burst (a reconnect storm, thousands of sessions
// made and gone offline) keeps it until Go's forced collection two minutes
// later, and its scavenger returns it to the system slowly after that: 20 s
// after 20,000 persistent sessions were made and left, an instance's RSS
// was 3 KiB per offline session where its live heap was 0.3 KiB. G1 has the
// same policy for the same reason (JEP 346, periodic collections when
// idle): a Releaser looks every Config.Every and, when the heap holds more
// than Config.MinExcess beyond its live bytes, at least as much again as
// those, and the process allocated less than half that excess since the
// last look (a quiet instance with 20,000 offline sessions allocated about
// 2 MB/s: heartbeats, the sessions table, scrapes; a busy one allocates its
// whole heap goal in seconds), collects and returns the free memory
// (debug.FreeOSMemory), at most once per Config.Gap. A busy process never
// meets the condition.
package idlegc

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Config bounds a Releaser.
type Config struct {
	// Every is how often it looks. Default: 5 s.
	Every time.Duration
	// Gap is the least time between two releases. Default: 30 s.
	Gap time.Duration
	// MinExcess is the least heap beyond the live bytes worth a release.
	// Default: 16 MiB.
	MinExcess uint64
}

// DefaultConfig is the Config Ferry runs.
func DefaultConfig() Config {
	return Config{Every: 5 * time.Second, Gap: 30 * time.Second, MinExcess: 16 << 20}
}

// Sample is what one look reads of the runtime.
type Sample struct {
	Allocs uint64 // bytes allocated since the process started
	Live   uint64 // live heap bytes at the last collection
	Heap   uint64 // heap bytes held: objects (live or dead) and free, not released
}

// Excess is the heap held beyond the live bytes.
func (s Sample) Excess() uint64 {
	if s.Heap <= s.Live {
		return 0
	}
	return s.Heap - s.Live
}

// Due reports whether to release at now, given the last look's sample
// prev, this one's cur and the last release's time.
func (c Config) Due(prev, cur Sample, last, now time.Time) bool {
	ex := cur.Excess()
	allocated := cur.Allocs - min(prev.Allocs, cur.Allocs)
	return now.Sub(last) >= c.Gap && ex >= c.MinExcess && ex >= cur.Live && allocated < ex/2
}

// Releaser is the loop of one process.
type Releaser struct {
	cfg     Config
	log     *slog.Logger
	samples []metrics.Sample
}

// New returns a Releaser; zero fields of cfg take DefaultConfig's.
func New(cfg Config, log *slog.Logger) *Releaser {
	d := DefaultConfig()
	if cfg.Every <= 0 {
		cfg.Every = d.Every
	}
	if cfg.Gap <= 0 {
		cfg.Gap = d.Gap
	}
	if cfg.MinExcess == 0 {
		cfg.MinExcess = d.MinExcess
	}
	return &Releaser{cfg: cfg, log: log, samples: []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}}
}

// read takes a Sample of the runtime.
func (r *Releaser) read() Sample {
	metrics.Read(r.samples)
	v := func(i int) uint64 {
		if r.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return r.samples[i].Value.Uint64()
	}
	return Sample{Allocs: v(0), Live: v(1), Heap: v(2) + v(3)}
}

// Run looks every Config.Every until ctx ends; it returns nil then.
func (r *Releaser) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	prev := r.read()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			cur := r.read()
			if r.cfg.Due(prev, cur, last, now) {
				debug.FreeOSMemory()
				last = time.Now()
				after := r.read()
				r.log.Debug("idle: memory returned to the system", "heap_before", cur.Heap, "heap_after", after.Heap,
					"live", after.Live, "took", last.Sub(now))
				cur = after
			}
			prev = cur
		}
	}
}
