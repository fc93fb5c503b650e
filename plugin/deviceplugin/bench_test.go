package deviceplugin_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitbed/limitbed/plugin/allocate"
	"github.com/limitbed/limitbed/plugin/deviceplugin"
)

// BenchmarkAllocateSilentAPIServer: Allocate over gRPC while the API server
// accepts connections and never answers, with the API timeout at 1 s and
// 8 calls in flight at a time (the kubelet sends one; a plugin that held a
// lock across its API calls made the eighth wait for the seven before it).
// It reports the p50 and p99 latency and the timeout, in ms: each call ends
// at the timeout, whatever the others do.
func BenchmarkAllocateSilentAPIServer(b *testing.B) {
	const timeout = time.Second
	e := setupKube(b, func(o *deviceplugin.Options, _ *allocate.Options) { o.APITimeout = timeout }, silentAPIServer(b))
	const inFlight = 8
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if _, err := e.plugin.AllocateOne(e.ctx, "GPU-a-0"); err == nil {
					b.Error("allocated without an API server")
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(timeout.Milliseconds()), "timeout-ms")
	}
}
