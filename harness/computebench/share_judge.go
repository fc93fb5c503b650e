package computebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/limitbed/limitbed/harness/gpuwork"
	"github.com/limitbed/limitbed/harness/gpuwork/window"
	"github.com/limitbed/limitbed/plugin/paths"
)

// judgeShared turns the work records read during a scenario into each container's shares and
// each GPU's busy fractions. t0 is the scenario's start, starts each container's (fakegpu's
// clock), unthrottled each container's workload rate alone.
func judgeShared(sc Scenario, tol float64, snaps []gpuwork.Snapshot, t0 uint64, starts []uint64, unthrottled []float64) (*Result, error) {
	if len(snaps) < 2 {
		return nil, fmt.Errorf("scenario %s: %d readings of the work records", sc.Name, len(snaps))
	}
	sort.Slice(snaps, func(a, b int) bool { return snaps[a].NowNS < snaps[b].NowNS })
	end := t0 + uint64(sc.Seconds*1e9)
	res := &Result{Scenario: sc.Name, Profile: sc.Profile, Seconds: sc.Seconds, Tolerance: tol}
	used := map[int]bool{}
	for i, c := range sc.Containers {
		unit, err := unitOf(snaps[0], c.GPU)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: container %s: %w", sc.Name, c.Name, err)
		}
		used[c.GPU] = true
		series := make([]window.Sample, len(snaps))
		works := make([]gpuwork.Work, len(snaps))
		for k, s := range snaps {
			w, err := s.ContainerWork(c.Name, unit)
			if err != nil {
				return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
			}
			series[k], works[k] = window.Sample{T: s.NowNS, V: w.WorkNS}, w
		}
		last := works[window.Nearest(series, end)]
		cr := ContainerResult{Container: c, Unthrottled: unthrottled[i], Kernels: last.Kernels, WorkNS: last.WorkNS}
		cr.Windows = window.Scale(window.Seconds(series, starts[i], end), unthrottled[i])
		cr.Long = window.Scale(window.Long(series, starts[i], end), unthrottled[i])
		if stall, at := window.LongestStall(series, starts[i]+SkipWindows*window.Second, end); stall > 0 {
			cr.LongestStall, cr.LongestStallAt = time.Duration(stall), time.Duration(at-starts[i])
		}
		lo, hi, judged := c.Expect(tol)
		if judged {
			cr.Judged, cr.Lo, cr.Hi, cr.OK = true, lo, hi, len(cr.Long) > 0
			for _, v := range cr.Long {
				if v < lo || v > hi {
					cr.OK = false
				}
			}
		}
		res.Containers = append(res.Containers, cr)
	}
	var gpus []int
	for g := range used {
		gpus = append(gpus, g)
	}
	sort.Ints(gpus)
	for _, g := range gpus {
		unit, _ := unitOf(snaps[0], g)
		series := make([]window.Sample, len(snaps))
		for k, s := range snaps {
			w, err := s.UnitWork(unit)
			if err != nil {
				return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
			}
			series[k] = window.Sample{T: s.NowNS, V: w.BusyNS}
		}
		res.GPUs = append(res.GPUs, GPUResult{GPU: g, Busy: window.Seconds(series, t0, end)})
	}
	return res, nil
}

// baselinesFor returns each container's unthrottled rate: its workload alone on a GPU of the
// scenario's profile, without the library, measured once per runner and workload.
func (r *SharedRunner) baselinesFor(ctx context.Context, sc Scenario) ([]float64, error) {
	r.mu.Lock()
	if r.baselines == nil {
		r.baselines = map[string]float64{}
	}
	todo := map[string]Container{}
	for _, c := range sc.Containers {
		if _, ok := r.baselines[sc.Profile+" "+c.signature()]; !ok {
			todo[sc.Profile+" "+c.signature()] = c
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for key, c := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := r.baseline(ctx, sc.Profile, c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			r.mu.Lock()
			r.baselines[key] = v
			r.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("scenario %s: unthrottled rates: %w", sc.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]float64, len(sc.Containers))
	for i, c := range sc.Containers {
		out[i] = r.baselines[sc.Profile+" "+c.signature()]
	}
	return out, nil
}

// baseline runs one container's workload alone, unlimited, on a fresh GPU and returns its rate
// of completed work (ns per ns) after its first 2 s.
func (r *SharedRunner) baseline(ctx context.Context, profile string, c Container) (float64, error) {
	secs := r.BaselineSeconds
	if secs <= SkipWindows {
		secs = 6
	}
	r.mu.Lock()
	r.n++
	dir := filepath.Join(r.Dir, fmt.Sprintf("baseline%d", r.n))
	r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	gpu := r.gpuEnv(profile, filepath.Join(dir, "gpu"))
	c.Name, c.Policy, c.GPU, c.Start, c.Die = "unthrottled", "none", 0, 0, 0
	t0 := time.Now()
	// It launches half a second longer than it is read, so the last reading is not its drain.
	ps, err := r.start(ctx, c, gpu, paths.ContainersDir(dir), secs+0.5)
	var a, b gpuwork.Snapshot
	if err == nil {
		time.Sleep(time.Until(t0.Add(SkipWindows * time.Second)))
		a, err = gpuwork.Once(ctx, r.Work, gpu)
	}
	if err == nil {
		time.Sleep(time.Until(t0.Add(time.Duration(secs * float64(time.Second)))))
		b, err = gpuwork.Once(ctx, r.Work, gpu)
	}
	for _, p := range ps {
		err = errors.Join(err, p.wait())
	}
	if err != nil {
		return 0, fmt.Errorf("%s alone: %w", c.signature(), err)
	}
	wa, errA := a.ContainerWork(c.Name, 0)
	wb, errB := b.ContainerWork(c.Name, 0)
	if err := errors.Join(errA, errB); err != nil {
		return 0, err
	}
	if b.NowNS <= a.NowNS || wb.WorkNS <= wa.WorkNS {
		return 0, fmt.Errorf("%s alone did no work in %.1f s", c.signature(), float64(b.NowNS-a.NowNS)/1e9)
	}
	return float64(wb.WorkNS-wa.WorkNS) / float64(b.NowNS-a.NowNS), nil
}
