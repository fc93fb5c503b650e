package computebench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ScenarioSeconds is the default length of a named scenario: the first 2 s, one 10 s window,
// and 2 s for a container started later.
const ScenarioSeconds = 14

// ForceShares is limits (percent) under force on GPU 0, one container each running workload,
// each started stagger after the previous one.
func ForceShares(workload string, stagger time.Duration, limits ...int) Scenario {
	name := "force"
	for _, l := range limits {
		name += "-" + strconv.Itoa(l)
	}
	name += "-" + workload
	if stagger > 0 {
		name += "-" + stagger.String()
	}
	sc := Scenario{Name: name, Seconds: ScenarioSeconds}
	for i, l := range limits {
		sc.Containers = append(sc.Containers, Container{Name: fmt.Sprintf("c%d-%d", i, l), Policy: "force", Limit: l,
			Workload: workload, KernelUS: 1000, Burst: 4, Procs: 1, Start: time.Duration(i) * stagger})
	}
	return sc
}

func one(name string, cs ...Container) Scenario {
	for i := range cs {
		if cs[i].KernelUS == 0 {
			cs[i].KernelUS = 1000
		}
		if cs[i].Burst == 0 {
			cs[i].Burst = 4
		}
		if cs[i].Procs == 0 {
			cs[i].Procs = 1
		}
	}
	return Scenario{Name: name, Seconds: ScenarioSeconds, Containers: cs}
}

// Scenarios are the shared-GPU cases of the compute limit's specification (issue 21, "Must
// show"), by name: `limitbed bench compute --scenario NAME` runs one. Each container is judged
// against its limit under force (± the tolerance) or the stated Want/Min; the rest are reported.
func Scenarios() map[string]Scenario {
	m := map[string]Scenario{}
	add := func(s Scenario) { m[s.Name] = s }
	for _, w := range Workloads {
		for _, st := range []time.Duration{0, time.Second} {
			add(ForceShares(w, st, 30, 50))
			add(ForceShares(w, st, 10, 90))
			add(ForceShares(w, st, 25, 25, 50))
		}
	}
	add(one("force-30-long-kernels", Container{Name: "long", Policy: "force", Limit: 30, Workload: "uniform", KernelUS: 1000000}))
	add(one("force-30-burst", Container{Name: "burst", Policy: "force", Limit: 30, Workload: "burst", Burst: 4}))
	add(one("force-30-burst-beside-50", Container{Name: "burst", Policy: "force", Limit: 30, Workload: "burst", Burst: 4},
		Container{Name: "busy", Policy: "force", Limit: 50, Workload: "uniform"}))
	add(one("default-30-alone", Container{Name: "alone", Policy: "default", Limit: 30, Workload: "mix", Min: 0.95}))
	add(one("default-30-50", Container{Name: "c30", Policy: "default", Limit: 30, Workload: "mix", Want: 0.30},
		Container{Name: "c50", Policy: "default", Limit: 50, Workload: "mix", Want: 0.50}))
	// Unequal limits summing to 100 %: a fair time slice each (1/16, 1/8) is far from most of them,
	// so only a limiter that gives each its own share passes.
	sixteen := one("force-16-sum-100")
	for i, l := range []int{1, 1, 1, 1, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12} {
		sixteen.Containers = append(sixteen.Containers, Container{Name: fmt.Sprintf("c%02d-%d", i, l), Policy: "force",
			Limit: l, Workload: "uniform", KernelUS: 1000, Burst: 4, Procs: 1})
	}
	add(sixteen)
	eight := one("force-8x8-gpus")
	eight.Profile = "8x-h100-80g"
	for g := 0; g < 8; g++ {
		for i, l := range []int{2, 4, 6, 8, 12, 16, 22, 30} {
			eight.Containers = append(eight.Containers, Container{Name: fmt.Sprintf("g%dc%d-%d", g, i, l), GPU: g,
				Policy: "force", Limit: l, Workload: "uniform", KernelUS: 1000, Burst: 4, Procs: 1})
		}
	}
	add(eight)
	// Eight staggered shape-mix pairs at once (30 + 50 on GPUs 0-3, 10 + 90 on 4-7): 16 launchers
	// on a small machine's CPUs, where a launcher the CPU does not run between a launch and its
	// marker once measured a 2 ms kernel at 2 µs and queued 0.75 s of work in its first slice
	// (docs/benchmarks.md, "With the node scheduler").
	pairs := one("force-mix-pairs-8-gpus-1s-apart")
	pairs.Profile = "8x-h100-80g"
	for g := 0; g < 8; g++ {
		limits := []int{30, 50}
		if g >= 4 {
			limits = []int{10, 90}
		}
		for _, c := range ForceShares("mix", time.Second, limits...).Containers {
			c.Name, c.GPU = fmt.Sprintf("g%d-%s", g, c.Name), g
			pairs.Containers = append(pairs.Containers, c)
		}
	}
	add(pairs)
	return m
}

// ScenarioNames lists Scenarios' names, sorted.
func ScenarioNames() string {
	var ns []string
	for n := range Scenarios() {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return strings.Join(ns, " ")
}
