package computebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Workloads launchprobe knows.
var Workloads = []string{"uniform", "mix", "graph"}

// Case is one measured run: a workload unlimited (Policy "") or under Limit percent with a
// GPU_CORE_UTILIZATION_POLICY. `default` runs alone on the GPU, with the node monitor's
// decision running, so it must come out unthrottled.
type Case struct {
	Workload string
	Policy   string
	Limit    int
}

func (c Case) String() string {
	if c.Policy == "" {
		return c.Workload + " unlimited"
	}
	return fmt.Sprintf("%s %s %d%%", c.Workload, c.Policy, c.Limit)
}

// Expect is the ratio a case must hold in every 10 s window: the limit for force, at least
// 0.95 of unlimited for disable and for default alone.
func (c Case) Expect(tol float64) (lo, hi float64) {
	if c.Policy == "force" && c.Limit > 0 && c.Limit < 100 {
		return float64(c.Limit)/100 - tol, float64(c.Limit)/100 + tol
	}
	return 0.95, 1.05
}

// Runner runs launchprobe for each case, one at a time (runs at once would share the GPU).
type Runner struct {
	Probe   string   // hamicore-launchprobe
	Preload string   // libvgpu.so
	Env     []string // environment of every run: fakegpu's variables, or nothing on a real GPU
	Seconds int
	Dir     string // scratch: the node's containers directory goes here
	Logger  klog.Logger

	n int
}

// staticIdentity is a node identity that does not change.
type staticIdentity struct{ snap *identity.Snapshot }

func (s staticIdentity) Snapshot(context.Context) (*identity.Snapshot, error) { return s.snap, nil }

// Run runs one case and returns launchprobe's result.
func (r *Runner) Run(ctx context.Context, c Case) (ProbeResult, error) {
	r.n++
	containers := filepath.Join(r.Dir, fmt.Sprintf("node%d", r.n))
	pod := filepath.Join(containers, fmt.Sprintf("bench%d_main", r.n))
	if err := os.MkdirAll(pod, 0o755); err != nil {
		return ProbeResult{}, fmt.Errorf("bench %s: %w", c, err)
	}
	args := []string{"--seconds", strconv.Itoa(r.Seconds), "--workload", c.Workload}
	if c.Workload == "uniform" {
		args = append(args, "--kernel-us", "1000")
	}
	cmd := exec.CommandContext(ctx, r.Probe, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, r.Env...)
	if c.Policy != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+r.Preload,
			libvars.SharedCache+"="+filepath.Join(pod, paths.UsageCacheName),
			libvars.SMLimit+"="+strconv.Itoa(c.Limit), libvars.CorePolicy+"="+c.Policy)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	stop := func() {}
	if c.Policy == "default" {
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		// The node's record of the one container: alone, so its GPUs need not be known.
		alone := &identity.Container{Key: identity.Key{PodUID: types.UID(fmt.Sprintf("bench%d", r.n)), Container: "main"},
			Limits: identity.Limits{Source: identity.SourceFile, Priority: limitsfile.DefaultPriority}}
		ids := staticIdentity{identity.NewSnapshot(time.Now(), []*identity.Container{alone})}
		f := &monitor.Feedback{Dir: containers, Identity: ids, Hold: 2 * monitor.DefaultFeedbackInterval, Logger: r.Logger}
		wg.Add(1)
		go func() { defer wg.Done(); f.Run(fctx, monitor.DefaultFeedbackInterval) }()
		stop = func() { cancel(); wg.Wait() }
	}
	err := cmd.Run()
	stop()
	if err != nil {
		return ProbeResult{}, fmt.Errorf("bench %s: %s %v: %w\nstdout: %s\nstderr: %s", c, r.Probe, args, err, out.String(), stderr.String())
	}
	res, err := ParseProbe(out.Bytes())
	if err != nil {
		return res, fmt.Errorf("bench %s: %w", c, err)
	}
	return res, nil
}

// Outcome is one case measured against its workload's unlimited run.
type Outcome struct {
	Case      Case
	Unlimited float64   // steady busy fraction of the unlimited run
	Ratios    []float64 // achieved/unlimited per 1 s window
	Long      []float64 // achieved/unlimited per 10 s window after 2 s
	Lo, Hi    float64
	OK        bool
	Starved   bool // the run or its unlimited run was starved of CPU (Starved): a miss to measure again
}

// Judge compares a run with its workload's unlimited steady figure.
func Judge(c Case, res ProbeResult, unlimited, tol float64) Outcome {
	o := Outcome{Case: c, Unlimited: unlimited, Ratios: Ratios(res.Windows, unlimited)}
	o.Long = Long(o.Ratios)
	o.Lo, o.Hi = c.Expect(tol)
	o.Starved = Starved(res.Waits, tol)
	o.OK = len(o.Long) > 0
	for _, v := range o.Long {
		if v < o.Lo || v > o.Hi {
			o.OK = false
		}
	}
	return o
}

// Report writes one line per outcome (10 s windows' range, 1 s windows after 2 s' range, verdict)
// and, with perWindow, the 1 s ratios.
func Report(w io.Writer, outs []Outcome, perWindow bool) {
	fmt.Fprintf(w, "%-22s %9s %-15s %-15s %-13s %s\n", "case", "unlimited", "10 s windows", "1 s windows", "want", "verdict")
	for _, o := range outs {
		verdict := "ok"
		if !o.OK {
			verdict = "OUT OF BOUNDS"
		}
		one := o.Ratios
		if len(one) > SkipWindows {
			one = one[SkipWindows:]
		}
		fmt.Fprintf(w, "%-22s %9.3f %-15s %-15s %-13s %s\n", o.Case, o.Unlimited, span(o.Long), span(one),
			fmt.Sprintf("%.2f..%.2f", o.Lo, o.Hi), verdict)
		if perWindow {
			s := make([]string, len(o.Ratios))
			for i, v := range o.Ratios {
				s[i] = strconv.FormatFloat(v, 'f', 3, 64)
			}
			fmt.Fprintf(w, "    1 s: %s\n", strings.Join(s, " "))
		}
	}
}

func span(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.3f..%.3f", lo, hi)
}

// Plan is every case of a bench: per workload, unlimited first, then each policy at each limit
// (disable and default at the first limit only: they must not throttle whatever it is).
func Plan(workloads, policies []string, limits []int) []Case {
	var cs []Case
	for _, w := range workloads {
		cs = append(cs, Case{Workload: w})
		for _, p := range policies {
			for i, l := range limits {
				if p != "force" && i > 0 {
					break
				}
				cs = append(cs, Case{Workload: w, Policy: p, Limit: l})
			}
		}
	}
	return cs
}

// RunAll runs the plan and judges every limited case against its workload's unlimited run.
func (r *Runner) RunAll(ctx context.Context, plan []Case, tol float64, progress io.Writer) ([]Outcome, error) {
	unlimited := map[string]float64{}
	starved := map[string]bool{} // the unlimited run of the workload was starved of CPU
	var outs []Outcome
	for _, c := range plan {
		t0 := time.Now()
		res, err := r.Run(ctx, c)
		if err != nil {
			return outs, err
		}
		if progress != nil {
			fmt.Fprintf(progress, "bench: %s: steady %.3f (%s)\n", c, Steady(res.Windows), time.Since(t0).Round(time.Second))
		}
		if c.Policy == "" {
			unlimited[c.Workload] = Steady(res.Windows)
			starved[c.Workload] = Starved(res.Waits, tol)
			continue
		}
		u, ok := unlimited[c.Workload]
		if !ok || u <= 0 {
			return outs, fmt.Errorf("bench %s: no unlimited run of %s before it", c, c.Workload)
		}
		o := Judge(c, res, u, tol)
		o.Starved = o.Starved || starved[c.Workload]
		outs = append(outs, o)
	}
	return outs, nil
}
