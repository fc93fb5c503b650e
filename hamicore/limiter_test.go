// Compute limit (CUDA_DEVICE_SM_LIMIT + GPU_CORE_UTILIZATION_POLICY) on fakegpu: each launch is
// 1 ms of simulated GPU time, launchprobe launches back to back for 3 s and reports the busy
// fraction over the whole run (until its queue drained). Ratios over seconds, no tight timing.
package hamicore_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

type launchResult struct {
	Launches     int     `json:"launches"`
	LaunchError  int     `json:"launch_error"`
	SyncError    int     `json:"sync_error"`
	BusyFraction float64 `json:"busy_fraction"`
}

// Tolerance of the limiter, documented in docs/hamicore.md: a 30 % limit lands in 20-40 %.
const limitLow, limitHigh = 0.20, 0.40

func (e *env) launches(environ []string, args ...string) launchResult {
	e.t.Helper()
	out, _ := e.run(environ, "hamicore-launchprobe", append([]string{"--seconds", "3"}, args...)...)
	var r launchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.LaunchError != 0 || r.SyncError != 0 || r.Launches == 0 {
		e.t.Fatalf("launchprobe %v: %q (%v)", args, out, err)
	}
	return r
}

func TestComputeLimit(t *testing.T) {
	const ms = "FAKEGPU_LAUNCH_NS=1000000"
	free := newEnv(t)
	unlimited := free.launches(free.limited(ms))
	if unlimited.BusyFraction < 0.9 {
		t.Fatalf("without a compute limit the device was busy %.2f of the time, want ~1 (the test cannot fail otherwise)", unlimited.BusyFraction)
	}
	cases := []struct {
		name   string
		env    []string
		args   []string
		lo, hi float64
	}{
		// The limit holds when it must: force, and default (the region's switch is stamped on).
		{"30 force", []string{"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force"}, nil, limitLow, limitHigh},
		{"30 default", []string{"CUDA_DEVICE_SM_LIMIT=30"}, nil, limitLow, limitHigh},
		// The per-thread-stream cuLaunchKernelEx through cuGetProcAddress is throttled once, not twice.
		{"30 force Ex ptsz", []string{"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=FORCE"}, []string{"--ex", "--ptsz", "--blocks", "4"}, limitLow, limitHigh},
		// disable: never limited; 100 and 0 mean no limit.
		{"30 disable", []string{"CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=disable"}, nil, 0.9, 1.01},
		{"100 force", []string{"CUDA_DEVICE_SM_LIMIT=100", "GPU_CORE_UTILIZATION_POLICY=force"}, nil, 0.9, 1.01},
		{"0 force", []string{"CUDA_DEVICE_SM_LIMIT=0", "GPU_CORE_UTILIZATION_POLICY=force"}, nil, 0.9, 1.01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t) // own pod: the first process stamps the region's limits
			r := e.launches(e.limited(append([]string{ms}, c.env...)...), c.args...)
			if r.BusyFraction < c.lo || r.BusyFraction > c.hi {
				t.Errorf("busy fraction %.3f (%d launches), want %.2f..%.2f (unlimited: %.3f)", r.BusyFraction, r.Launches, c.lo, c.hi, unlimited.BusyFraction)
			}
		})
	}
}

// The limit is the container's: two processes of one pod share 30 %, they do not get 30 % each.
func TestComputeLimitIsPerContainer(t *testing.T) {
	e := newEnv(t)
	environ := e.limited("FAKEGPU_LAUNCH_NS=1000000", "CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force")
	var outs [2]bytes.Buffer
	var sum float64
	procs := make([]*exec.Cmd, 2)
	for i := range procs {
		procs[i] = e.cmd(environ, "hamicore-launchprobe", "--seconds", "4")
		procs[i].Stdout = &outs[i]
		if err := procs[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("launchprobe %d: %v: %s", i, err, outs[i].String())
		}
		var r launchResult
		if err := json.Unmarshal(outs[i].Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		sum += r.BusyFraction
	}
	if sum < limitLow || sum > limitHigh {
		t.Errorf("two processes under one 30 %% limit were busy %.3f together, want %.2f..%.2f", sum, limitLow, limitHigh)
	}
}
