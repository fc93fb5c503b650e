package computebench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseContainer(t *testing.T) {
	c, err := ParseContainer("limit=30,policy=default,workload=burst,burst=2,kernel-us=500,start=1.5s,gpu=1,priority=2,procs=3,die=2s,name=web", 4)
	want := Container{Name: "web", GPU: 1, Limit: 30, Policy: "default", Priority: 2, Start: 1500 * time.Millisecond,
		Workload: "burst", KernelUS: 500, Burst: 2, Procs: 3, Die: 2 * time.Second}
	if err != nil || c.String() != want.String() {
		t.Fatalf("got %v, %v; want %v", c, err, want)
	}
	if back, err := ParseContainer(c.String(), 0); err != nil || back.String() != c.String() {
		t.Errorf("round trip: %v, %v", back, err)
	}
	d, err := ParseContainer("limit=50", 7)
	if err != nil || d.Name != "c7" || d.Policy != "force" || d.Workload != "uniform" || d.KernelUS != 1000 || d.Procs != 1 {
		t.Errorf("defaults: %+v, %v", d, err)
	}
	if lo, hi, judged := d.Expect(0.03); !judged || math.Abs(lo-0.47) > 1e-9 || math.Abs(hi-0.53) > 1e-9 {
		t.Errorf("force 50 judged %v %v..%v", judged, lo, hi)
	}
	for _, c := range []struct {
		spec  string
		judge bool
	}{{"policy=default,limit=30", false}, {"policy=none", false}, {"policy=force,limit=100", false},
		{"policy=default,limit=30,min=0.95", true}, {"policy=none,want=0.5", true}} {
		x, err := ParseContainer(c.spec, 0)
		if _, _, judged := x.Expect(0.03); err != nil || judged != c.judge {
			t.Errorf("%s: judged %v (%v), want %v", c.spec, judged, err, c.judge)
		}
	}
	for _, bad := range []string{"", "limit", "limit=", "limit=101", "policy=fast", "workload=gemm", "start=-1s",
		"gpu=16", "procs=0", "want=2", "want=0.3,min=0.2", "name=a_b", "name=" + strings.Repeat("x", 41), "limit=3,limit=4",
		"colour=blue", "kernel-us=0", "start=soon", "die=1s", "procs=2,die=0s", "procs=2,die=soon", "procs=65"} {
		if _, err := ParseContainer(bad, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseContainer(f *testing.F) {
	f.Add("limit=30,policy=force,workload=mix,start=1s")
	f.Add("name=x,gpu=3,procs=2,want=0.5")
	f.Fuzz(func(t *testing.T, spec string) {
		c, err := ParseContainer(spec, 0)
		if err != nil {
			return
		}
		if checkName(c.Name) != nil || oneOf(c.Policy, Policies) != nil || oneOf(c.Workload, SharedWorkloads) != nil ||
			c.Procs < 1 || c.Limit < 0 || c.Limit > 100 || c.Start < 0 {
			t.Fatalf("%q accepted as %+v", spec, c)
		}
		if back, err := ParseContainer(c.String(), 0); err != nil || back.String() != c.String() {
			t.Fatalf("%q: %v does not read back: %v", spec, c, err)
		}
	})
}

func TestScenarioCheck(t *testing.T) {
	ok := Scenario{Name: "x", Seconds: 8, Containers: []Container{{Name: "a"}, {Name: "b", Start: 5 * time.Second}}}
	if err := ok.Check(1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Scenario{
		{Name: "none", Seconds: 8},
		{Name: "short", Seconds: 2, Containers: []Container{{Name: "a"}}},
		{Name: "dup", Seconds: 8, Containers: []Container{{Name: "a"}, {Name: "a"}}},
		{Name: "late", Seconds: 8, Containers: []Container{{Name: "a", Start: 6 * time.Second}}},
		{Name: "gpu", Seconds: 8, Containers: []Container{{Name: "a", GPU: 1}}},
	} {
		if err := bad.Check(1); err == nil {
			t.Errorf("scenario %s accepted", bad.Name)
		}
	}
	for name, sc := range Scenarios() {
		gpus := 1
		if sc.Profile == "8x-h100-80g" {
			gpus = 8
		}
		if err := sc.Check(gpus); err != nil || sc.Name != name {
			t.Errorf("named scenario %s: %v", name, err)
		}
		sum := map[int]int{}
		for _, c := range sc.Containers {
			if c.Policy == "force" {
				sum[c.GPU] += c.Limit
			}
		}
		for g, s := range sum {
			if s > 100 || (strings.Contains(name, "sum-100") || strings.Contains(name, "8x8")) && s != 100 {
				t.Errorf("scenario %s: limits on GPU %d sum to %d%%", name, g, s)
			}
		}
	}
}
