package ringbuffer

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchCapacity and benchBatch are shared by BenchmarkRing and
// BenchmarkChannel so the two compare like for like.
const (
	benchCapacity = 1024
	benchBatch    = 256
)

type benchMsg struct{ seq uint64 }

var benchProducers = []int{1, 4, 16}

// split gives each of n producers its share of total items.
func split(total, n, i int) int {
	share := total / n
	if i == 0 {
		share += total % n
	}
	return share
}

// BenchmarkRing: N producers Push b.N pointers in total; one consumer drains
// them with PopBatch in batches of up to benchBatch. Metric: items/s.
func BenchmarkRing(b *testing.B) {
	for _, np := range benchProducers {
		b.Run(fmt.Sprintf("producers=%d", np), func(b *testing.B) {
			r := mustNew[*benchMsg](b, benchCapacity)
			msg := &benchMsg{}
			ctx := context.Background()
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0 := processCPU()
			for p := range np {
				n := split(b.N, np, p)
				wg.Go(func() {
					for range n {
						if err := r.Push(ctx, msg); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			dst := make([]*benchMsg, benchBatch)
			for got := 0; got < b.N; {
				n, err := r.PopBatch(ctx, dst)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			wg.Wait()
			reportMetrics(b, cpu0)
			b.ReportMetric(float64(r.parks.Load())*1000/float64(b.N), "parks/kitem")
		})
	}
}

// BenchmarkChannel is BenchmarkRing with a buffered channel of the same
// capacity and the same batching consumer (block for one, then take what is
// there up to benchBatch).
func BenchmarkChannel(b *testing.B) {
	for _, np := range benchProducers {
		b.Run(fmt.Sprintf("producers=%d", np), func(b *testing.B) {
			ch := make(chan *benchMsg, benchCapacity)
			msg := &benchMsg{}
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0 := processCPU()
			for p := range np {
				n := split(b.N, np, p)
				wg.Go(func() {
					for range n {
						ch <- msg
					}
				})
			}
			dst := make([]*benchMsg, benchBatch)
			for got := 0; got < b.N; {
				dst[0] = <-ch
				n := 1
			fill:
				for n < len(dst) {
					select {
					case v := <-ch:
						dst[n] = v
						n++
					default:
						break fill
					}
				}
				got += n
			}
			wg.Wait()
			reportMetrics(b, cpu0)
		})
	}
}

// reportMetrics reports items/s (the contract metric) and the process CPU
// time per item, which a loaded machine disturbs less than wall time.
func reportMetrics(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/item")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
