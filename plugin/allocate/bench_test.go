package allocate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// BenchmarkAllocate measures one file-mode Allocate including the cache dir
// recreation and the fsynced limits file, and reports p50/p99 latency.
// LIMITBED_BENCH_DIR picks the hook directory (use a disk-backed path: fsync
// on tmpfs costs nothing).
func BenchmarkAllocate(b *testing.B) { benchAllocate(b, nil) }

// BenchmarkAllocateNoSync is BenchmarkAllocate with both fsyncs turned into
// no-ops, to show how much of the latency is the disk's.
func BenchmarkAllocateNoSync(b *testing.B) { benchAllocate(b, noSyncFS{}) }

type noSyncFS struct{ limitsfile.OSFS }

type noSyncFile struct{ limitsfile.File }

func (noSyncFS) CreateTemp(dir, pattern string) (limitsfile.File, error) {
	f, err := limitsfile.OSFS{}.CreateTemp(dir, pattern)
	return noSyncFile{f}, err
}
func (noSyncFS) SyncDir(string) error { return nil }
func (noSyncFile) Sync() error        { return nil }

func benchAllocate(b *testing.B, fsys limitsfile.FS) {
	a, hook := newAllocator(b, func(o *Options) {
		o.FS = fsys
		if d := os.Getenv("LIMITBED_BENCH_DIR"); d != "" {
			dir, err := os.MkdirTemp(d, "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			o.HookPath = dir
			o.LockDir = filepath.Join(dir, "vgpulock")
		}
	})
	_ = hook
	if err := os.MkdirAll(paths.ContainersDir(a.opts.HookPath), 0o755); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req := mkReq(fmt.Sprintf("uid%d", i%64), "main", nil, devA, devB)
		start := time.Now()
		if _, err := a.Allocate(req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
