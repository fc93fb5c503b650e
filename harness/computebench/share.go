package computebench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Container is one container of a shared-GPU scenario: Procs processes of launchprobe, each with
// the container's usage region and limits (as the device plugin would start them), on one GPU,
// from Start until the scenario ends. The judge is fakegpu's record of the container's completed
// work (FAKEGPU_CONTAINER = Name), divided by the same workload's rate alone and unthrottled.
type Container struct {
	Name     string        `json:"name"`
	GPU      int           `json:"gpu"`            // NVML index: CUDA_VISIBLE_DEVICES
	Limit    int           `json:"limit"`          // CUDA_DEVICE_SM_LIMIT, percent
	Policy   string        `json:"policy"`         // force | default | disable (GPU_CORE_UTILIZATION_POLICY), or none: no libvgpu.so
	Priority int           `json:"priority"`       // CUDA_TASK_PRIORITY (lower is higher)
	Start    time.Duration `json:"start"`          // after the scenario's start
	Stop     time.Duration `json:"stop,omitempty"` // it stops launching then (0: at the scenario's end)
	Workload string        `json:"workload"`       // uniform | mix | graph | burst
	KernelUS int           `json:"kernel_us"`
	Burst    int           `json:"burst"` // burst: kernels per synchronisation
	Procs    int           `json:"procs"`
	// Die: its first process SIGKILLs itself this long after its start, right after a launch
	// (while it holds the container's slice); the others go on. 0: none dies.
	Die time.Duration `json:"die,omitempty"`
	// Report: what the tenant puts in its scheduler report's place before its processes start
	// (ReportPlants): a symlink, a directory, a short file. "": nothing.
	Report string `json:"report,omitempty"`
	// Held: its processes may still be held (a debt of long kernels) when the scenario ends: they
	// are stopped then, not taken for stalled.
	Held bool `json:"held,omitempty"`
	// The share every 10 s window after the first 2 s must hold: Want ± the tolerance, or at
	// least Min. Zero Want and Min: Limit/100 under force with a limit of 1..99, else not judged.
	Want float64  `json:"want,omitempty"`
	Min  float64  `json:"min,omitempty"`
	Env  []string `json:"env,omitempty"` // more environment for its processes
}

// Policies a container can run under; "none" runs it without the library.
var Policies = []string{"force", "default", "disable", "none"}

// SharedWorkloads are Workloads plus burst (launchprobe's kernels in bursts, each followed by a
// synchronisation).
var SharedWorkloads = append(append([]string{}, Workloads...), "burst")

// Expect is the band the container's 10 s windows are judged against; judged false when none.
func (c Container) Expect(tol float64) (lo, hi float64, judged bool) {
	switch {
	case c.Want > 0:
		return c.Want - tol, c.Want + tol, true
	case c.Min > 0:
		return c.Min, math.Inf(1), true
	case c.Policy == "force" && c.Limit > 0 && c.Limit < 100:
		return float64(c.Limit)/100 - tol, float64(c.Limit)/100 + tol, true
	}
	return 0, 0, false
}

// signature names what the container's unthrottled rate depends on: its workload and processes.
func (c Container) signature() string {
	s := fmt.Sprintf("%s kernel-us=%d burst=%d procs=%d", c.Workload, c.KernelUS, c.Burst, c.Procs)
	if len(c.Env) > 0 {
		s += " env=" + strings.Join(c.Env, " ") // a workload's environment moves its rate (FAKEGPU_KERNEL_POWER_PCT)
	}
	return s
}

// String is the container as a spec ParseContainer reads back.
func (c Container) String() string {
	s := fmt.Sprintf("name=%s,gpu=%d,policy=%s,limit=%d,priority=%d,start=%s,workload=%s,kernel-us=%d,burst=%d,procs=%d",
		c.Name, c.GPU, c.Policy, c.Limit, c.Priority, c.Start, c.Workload, c.KernelUS, c.Burst, c.Procs)
	if c.Die > 0 {
		s += ",die=" + c.Die.String()
	}
	if c.Stop > 0 {
		s += ",stop=" + c.Stop.String()
	}
	if c.Report != "" {
		s += ",report=" + c.Report
	}
	if c.Held {
		s += ",held=true"
	}
	if c.Want > 0 {
		s += ",want=" + strconv.FormatFloat(c.Want, 'g', -1, 64)
	}
	if c.Min > 0 {
		s += ",min=" + strconv.FormatFloat(c.Min, 'g', -1, 64)
	}
	return s
}

// Scenario is a set of containers on the GPUs of one fakegpu profile, run together for Seconds.
type Scenario struct {
	Name       string      `json:"name"`
	Profile    string      `json:"profile"` // fakegpu profile; default a16-16q (8x-h100-80g: eight GPUs)
	Seconds    float64     `json:"seconds"`
	Containers []Container `json:"containers"`
}

const specKeys = "name gpu limit policy priority start workload kernel-us burst procs die report held stop want min"

// ReportPlants are what a container can put in its scheduler report's place (Container.Report).
var ReportPlants = []string{"symlink", "dir", "short"}

// ParseContainer reads a container spec: comma-separated key=value pairs (specKeys), e.g.
// "limit=30,policy=force,workload=mix,start=1s". Defaults: policy force, workload uniform,
// kernel-us 1000, burst 4 (burst workload), procs 1, GPU 0; the name defaults to c<index>.
func ParseContainer(spec string, index int) (Container, error) {
	c := Container{Name: fmt.Sprintf("c%d", index), Policy: "force", Workload: "uniform", KernelUS: 1000, Burst: 4, Procs: 1}
	seen := map[string]bool{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return c, fmt.Errorf("container %q: %q is not key=value (keys: %s)", spec, kv, specKeys)
		}
		if seen[k] {
			return c, fmt.Errorf("container %q: %s given twice", spec, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "name":
			c.Name, err = v, checkName(v)
		case "gpu":
			c.GPU, err = intIn(v, 0, 15)
		case "limit":
			c.Limit, err = intIn(v, 0, 100)
		case "priority":
			c.Priority, err = intIn(v, -1000, 1000)
		case "procs":
			c.Procs, err = intIn(v, 1, 64)
		case "kernel-us":
			c.KernelUS, err = intIn(v, 1, 10000000)
		case "burst":
			c.Burst, err = intIn(v, 1, 100000)
		case "policy":
			c.Policy, err = v, oneOf(v, Policies)
		case "workload":
			c.Workload, err = v, oneOf(v, SharedWorkloads)
		case "start":
			c.Start, err = time.ParseDuration(v)
			if err == nil && (c.Start < 0 || c.Start > time.Hour) {
				err = fmt.Errorf("want 0 to 1h")
			}
		case "held":
			c.Held, err = strconv.ParseBool(v)
		case "report":
			c.Report, err = v, oneOf(v, ReportPlants)
		case "stop":
			c.Stop, err = time.ParseDuration(v)
			if err == nil && (c.Stop <= 0 || c.Stop > time.Hour) {
				err = fmt.Errorf("want more than 0, at most 1h")
			}
		case "die":
			c.Die, err = time.ParseDuration(v)
			if err == nil && (c.Die <= 0 || c.Die > time.Hour) {
				err = fmt.Errorf("want more than 0, at most 1h")
			}
		case "want", "min":
			var f float64
			f, err = strconv.ParseFloat(v, 64)
			if err == nil && !(f > 0 && f <= 1.5) {
				err = fmt.Errorf("want a share above 0 and at most 1.5")
			}
			if k == "want" {
				c.Want = f
			} else {
				c.Min = f
			}
		default:
			return c, fmt.Errorf("container %q: unknown key %q (keys: %s)", spec, k, specKeys)
		}
		if err != nil {
			return c, fmt.Errorf("container %q: %s=%s: %w", spec, k, v, err)
		}
	}
	if c.Stop > 0 && c.Stop <= c.Start {
		return c, fmt.Errorf("container %q: stop must come after start", spec)
	}
	if c.Die > 0 && c.Procs < 2 {
		return c, fmt.Errorf("container %q: die needs procs of 2 or more (one dies, the others go on)", spec)
	}
	if c.Want > 0 && c.Min > 0 {
		return c, fmt.Errorf("container %q: want and min together: judge by one", spec)
	}
	return c, nil
}

func intIn(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("want a whole number %d..%d", lo, hi)
	}
	return n, nil
}

func oneOf(v string, list []string) error {
	for _, x := range list {
		if v == x {
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(list, ", "))
}

// checkName: what FAKEGPU_CONTAINER and a pod UID (the container's key, ContainerKey) both take.
func checkName(v string) error {
	if len(v) == 0 || len(v) > 40 {
		return fmt.Errorf("want 1 to 40 characters")
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("want A-Z a-z 0-9 - only")
		}
	}
	return nil
}

// Check validates a scenario: names unique, every container starting before the end with at
// least one judged window, GPUs within the profile's count (ngpus; 0: not known here).
func (s Scenario) Check(ngpus int) error {
	if len(s.Containers) == 0 {
		return fmt.Errorf("scenario %s: no containers", s.Name)
	}
	if s.Seconds < 3 || s.Seconds > 3600 {
		return fmt.Errorf("scenario %s: %.0f s: want 3 to 3600 (the first 2 s of a container are not judged)", s.Name, s.Seconds)
	}
	names := map[string]bool{}
	for _, c := range s.Containers {
		if err := checkName(c.Name); err != nil {
			return fmt.Errorf("scenario %s: container name %q: %w", s.Name, c.Name, err)
		}
		if names[c.Name] {
			return fmt.Errorf("scenario %s: two containers named %s", s.Name, c.Name)
		}
		names[c.Name] = true
		if left := s.Seconds - c.Start.Seconds(); left < SkipWindows+1 {
			return fmt.Errorf("scenario %s: container %s starts at %s of %.0f s: it needs %d s more to be judged", s.Name, c.Name, c.Start, s.Seconds, SkipWindows+1)
		}
		if ngpus > 0 && c.GPU >= ngpus {
			return fmt.Errorf("scenario %s: container %s on GPU %d: profile %s has %d", s.Name, c.Name, c.GPU, s.Profile, ngpus)
		}
	}
	return nil
}

// sortedByStart returns the containers' indexes in the order they start.
func (s Scenario) sortedByStart() []int {
	idx := make([]int, len(s.Containers))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.Containers[idx[a]].Start < s.Containers[idx[b]].Start })
	return idx
}
