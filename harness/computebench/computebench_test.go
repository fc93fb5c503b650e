package computebench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestWindows(t *testing.T) {
	w := []float64{2, 1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.5}
	if got := Steady(w); !near(got, (0.3*9+0.5)/10) {
		t.Errorf("Steady = %v", got)
	}
	if got := Steady([]float64{0.4}); !near(got, 0.4) {
		t.Errorf("Steady of a short run = %v", got)
	}
	long := Long(w)
	if len(long) != 1 || !near(long[0], (0.3*9+0.5)/10) {
		t.Errorf("Long = %v", long)
	}
	w = append(w, 0.3, 0.3)
	if long = Long(w); len(long) != 3 || !near(long[0], (0.3*9+0.5)/10) || !near(long[2], (0.3*9+0.5)/10) {
		t.Errorf("Long sliding = %v", long)
	}
	if Long([]float64{1, 1}) != nil {
		t.Error("Long of a 2 s run should be empty")
	}
	if r := Ratios([]float64{0.3, 0.6}, 0.6); !near(r[0], 0.5) || !near(r[1], 1) {
		t.Errorf("Ratios = %v", r)
	}
}

func TestJudge(t *testing.T) {
	base := []float64{2, 1}
	steady := func(v float64) []float64 {
		w := append([]float64{}, base...)
		for i := 0; i < 10; i++ {
			w = append(w, v)
		}
		return w
	}
	cases := []struct {
		c    Case
		w    []float64
		unl  float64
		want bool
	}{
		{Case{"uniform", "force", 30}, steady(0.3), 1, true},
		{Case{"uniform", "force", 30}, steady(0.33), 1, false},
		{Case{"mix", "force", 60}, steady(0.59), 0.98, true},
		{Case{"graph", "force", 30}, steady(1), 1, false}, // not throttled at all
		{Case{"uniform", "default", 30}, steady(0.97), 1, true},
		{Case{"uniform", "default", 30}, steady(0.3), 1, false}, // default alone must not throttle
		{Case{"uniform", "disable", 30}, steady(0.9), 1, false},
		{Case{"uniform", "force", 30}, []float64{0.3}, 1, false}, // too short to judge
	}
	for _, c := range cases {
		if o := Judge(c.c, ProbeResult{Windows: c.w}, c.unl, 0.02); o.OK != c.want {
			t.Errorf("%s on %v: ok = %v, want %v (%+v)", c.c, c.w, o.OK, c.want, o)
		}
	}
}

func TestPlan(t *testing.T) {
	got := Plan([]string{"uniform", "graph"}, []string{"force", "default"}, []int{30, 60})
	var s []string
	for _, c := range got {
		s = append(s, c.String())
	}
	want := "uniform unlimited,uniform force 30%,uniform force 60%,uniform default 30%,graph unlimited,graph force 30%,graph force 60%,graph default 30%"
	if strings.Join(s, ",") != want {
		t.Errorf("plan = %s", strings.Join(s, ","))
	}
}

func TestParseProbeRejects(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"error":"dlopen"}`, `{"launches":3,"launch_error":2,"windows":[1]}`,
		`{"launches":3,"windows":[]}`, `{"launches":3,"windows":[-1]}`} {
		if _, err := ParseProbe([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	r, err := ParseProbe([]byte(`{"launches":3,"busy_fraction":0.3,"windows":[0.3,0.31]}`))
	if err != nil || len(r.Windows) != 2 {
		t.Errorf("valid output: %+v %v", r, err)
	}
}

func FuzzParseProbe(f *testing.F) {
	f.Add([]byte(`{"launches":3,"busy_fraction":0.3,"windows":[0.3,0.31]}`))
	f.Add([]byte(`{"error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseProbe(b)
		if err == nil && (r.Launches == 0 || len(r.Windows) == 0) {
			t.Fatalf("accepted %q as %+v", b, r)
		}
	})
}

// The bench end to end on fakegpu, short: a 30 % force run of the graph workload and the
// default policy alone (the monitor's decision running) against their unlimited run, ± 0.03. A
// bound missed in a run the machine starved of CPU (Starved) is measured again, up to three
// times; one missed in a run it did not starve fails at once.
func TestRunnerOnFakegpu(t *testing.T) {
	p := cbuild.Build(t)
	const tol, attempts = 0.03, 3
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		r := &Runner{
			Probe: filepath.Join(p.Bin, "hamicore-launchprobe"), Preload: filepath.Join(p.Lib, "libvgpu.so"),
			Env: []string{"LD_LIBRARY_PATH=" + p.Lib, "FAKEGPU_PROFILE=a16-16q",
				"FAKEGPU_PROFILE_DIR=" + filepath.Join(p.Root, "fakegpu", "profiles"), "FAKEGPU_STATE_DIR=" + filepath.Join(dir, "gpu")},
			Seconds: 5, Dir: dir, Logger: klog.Background(),
		}
		if v := os.Getenv("ASAN_OPTIONS"); v != "" {
			r.Env = append(r.Env, "ASAN_OPTIONS="+v)
		}
		outs, err := r.RunAll(context.Background(), Plan([]string{"graph"}, []string{"force", "default"}, []int{30}), tol, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		Report(&b, outs, true)
		if len(outs) != 2 {
			t.Fatalf("outcomes: %s", b.String())
		}
		missed, starved := false, true
		for _, o := range outs {
			if !o.OK {
				missed, starved = true, starved && o.Starved
			}
		}
		if !missed {
			return
		}
		if !starved || attempt == attempts {
			for _, o := range outs {
				if !o.OK {
					t.Errorf("%s out of bounds (attempt %d, starved of CPU: %v):\n%s", o.Case, attempt, o.Starved, b.String())
				}
			}
			return
		}
		t.Logf("attempt %d: a bound missed in a run the machine starved of CPU; measuring again:\n%s", attempt, b.String())
	}
}

// A run is starved when a window after the unjudged ones waited for a CPU at least the tolerance.
func TestStarved(t *testing.T) {
	for _, tc := range []struct {
		waits []float64
		want  bool
	}{
		{nil, false},
		{[]float64{0.9, 0.9}, false},              // only the unjudged windows
		{[]float64{0.9, 0.9, 0.01, 0.029}, false}, // under the tolerance
		{[]float64{0, 0, 0.01, 0.03}, true},       // the tolerance's worth
		{[]float64{0, 0, 0.2, 0, 0, 0, 0}, true},
	} {
		if got := Starved(tc.waits, 0.03); got != tc.want {
			t.Errorf("Starved(%v, 0.03) = %v, want %v", tc.waits, got, tc.want)
		}
	}
}
