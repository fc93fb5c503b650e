// Integration tests of libvgpu.so against fakegpu: real binaries, real preloading, real shared
// usage.cache. Each test names the behaviour it proves; C unit tests cover the pure loader and
// the region in isolation (make -C hamicore test).
package hamicore_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitbed/limitbed/internal/cbuild"
)

const mib = 1 << 20

type probeResult struct {
	Role         string `json:"role"`
	API          string `json:"api"`
	Pid          int    `json:"pid"`
	RequestedMiB int    `json:"requested_mib"`
	GrantedMiB   int    `json:"granted_mib"`
	Error        string `json:"error"`
	TotalMiB     int    `json:"total_mib"`
	FreeMiB      int    `json:"free_mib"`
}

// region is what regiondump prints (plugin/region's Region), as far as these tests read it.
type region struct {
	Layout struct {
		Name  string `json:"name"`
		Major int    `json:"major"`
	} `json:"layout"`
	Devices []regionDevice `json:"devices"`
	Slots   []struct {
		Pid   int      `json:"pid"`
		Alive bool     `json:"alive"`
		Used  []uint64 `json:"used"`
	} `json:"slots"`
}

type regionDevice struct {
	Index      int    `json:"index"`
	LimitBytes uint64 `json:"limit_bytes"`
	UsedBytes  uint64 `json:"used_bytes"` // used_total: the counter allocations are checked against
	LiveBytes  uint64 `json:"live_bytes"`
}

// device returns device d of the region (zero when the region lists no such device).
func (r region) device(d int) regionDevice {
	for _, dev := range r.Devices {
		if dev.Index == d {
			return dev
		}
	}
	return regionDevice{}
}

type env struct {
	t     *testing.T
	p     cbuild.Paths
	pod   string // the pod's cache directory
	cache string // usage.cache inside it
	base  []string
}

// newEnv: a fresh "pod": its own cache directory and fakegpu state (its own fake GPU).
func newEnv(t *testing.T) *env {
	t.Helper()
	p := cbuild.Build(t)
	dir := t.TempDir()
	e := &env{t: t, p: p, pod: filepath.Join(dir, "pod"), base: []string{
		"LD_LIBRARY_PATH=" + p.Lib,
		"FAKEGPU_STATE_DIR=" + filepath.Join(dir, "gpu"),
	}}
	if prof := os.Getenv("FAKEGPU_PROFILE"); prof != "" { // run against another card
		e.base = append(e.base, "FAKEGPU_PROFILE="+prof, "FAKEGPU_PROFILE_DIR="+os.Getenv("FAKEGPU_PROFILE_DIR"))
	} else {
		e.base = append(e.base, "FAKEGPU_PROFILE=a16-16q", "FAKEGPU_PROFILE_DIR="+filepath.Join(p.Root, "fakegpu", "profiles"))
	}
	for _, d := range []string{e.pod, filepath.Join(dir, "gpu")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.cache = filepath.Join(e.pod, "usage.cache")
	return e
}

// limited: the environment a container started by the device plugin has.
func (e *env) limited(extra ...string) []string {
	return append(append([]string{
		"LD_PRELOAD=" + filepath.Join(e.p.Lib, "libvgpu.so"),
		"CUDA_DEVICE_MEMORY_LIMIT_0=3000m",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + e.cache,
	}, e.base...), extra...)
}

func (e *env) cmd(environ []string, bin string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(e.p.Bin, bin), args...)
	c.Env = environ
	return c
}

func (e *env) run(environ []string, bin string, args ...string) (string, string) {
	e.t.Helper()
	c := e.cmd(environ, bin, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		e.t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", bin, args, err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func parseProbe(t *testing.T, out string) []probeResult {
	t.Helper()
	var rs []probeResult
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r probeResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad probe output %q: %v", line, err)
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		t.Fatalf("no JSON line in %q", out)
	}
	return rs
}

func (e *env) probe(environ []string, bin string, args ...string) probeResult {
	e.t.Helper()
	out, _ := e.run(environ, bin, args...)
	return parseProbe(e.t, out)[0]
}

func (e *env) dump() region {
	e.t.Helper()
	out, _ := e.run(nil, "regiondump", e.cache)
	var r region
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		e.t.Fatalf("regiondump: %v\n%s", err, out)
	}
	return r
}

func refused(r probeResult) bool {
	return r.GrantedMiB == 0 && strings.Contains(r.Error, "OUT_OF_MEMORY")
}
func granted(r probeResult) bool { return r.GrantedMiB == r.RequestedMiB && r.Error == "" }

// The basic promise: limit 3000m from the environment, 4096 MiB refused, 2048 MiB granted, the
// device looks like a 3000 MiB card to CUDA and to NVML — through cudaprobe (fakegpu's tool).
func TestEnvironmentLimit(t *testing.T) {
	e := newEnv(t)
	for _, api := range []string{"symbols", "dlsym", "procaddress"} {
		if r := e.probe(e.limited(), "cudaprobe", "--mib", "4096", "--api="+api); !refused(r) {
			t.Errorf("cudaprobe --api=%s 4096 MiB under 3000m: %+v, want CUDA_ERROR_OUT_OF_MEMORY", api, r)
		}
		if r := e.probe(e.limited(), "cudaprobe", "--mib", "2048", "--api="+api); !granted(r) || r.TotalMiB != 3000 {
			t.Errorf("cudaprobe --api=%s 2048 MiB under 3000m: %+v, want granted, total 3000", api, r)
		}
	}
	// Without the library the same request succeeds: the test can fail.
	if r := e.probe(e.base, "cudaprobe", "--mib", "4096"); !granted(r) {
		t.Errorf("without libvgpu 4096 MiB: %+v, want granted", r)
	}
	out, _ := e.run(e.limited(), "gpuinfo", "--json")
	if !jsonHasTotal(out, 3000) {
		t.Errorf("gpuinfo --json under 3000m does not show a 3000 MiB total:\n%s", out)
	}
}

// jsonHasTotal: some "total..." number in the document is 3000 MiB (in MiB or in bytes).
func jsonHasTotal(doc string, wantMiB float64) bool {
	var v any
	if json.Unmarshal([]byte(doc), &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(x any) bool {
		switch x := x.(type) {
		case map[string]any:
			for k, val := range x {
				if n, ok := val.(float64); ok && strings.Contains(strings.ToLower(k), "total") && (n == wantMiB || n == wantMiB*mib) {
					return true
				}
				if walk(val) {
					return true
				}
			}
		case []any:
			for _, val := range x {
				if walk(val) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// Every allocation kind through every way a program reaches the driver: linked symbols,
// dlopen+dlsym, cuGetProcAddress (incl. the per-thread-default-stream variants).
func TestEveryAllocationPathEveryAPI(t *testing.T) {
	e := newEnv(t)
	for _, api := range []string{"symbols", "dlsym", "procaddress"} {
		for _, kind := range []string{"mem", "managed", "pitch", "async", "vmm", "array"} {
			for _, ptsz := range []bool{false, true} {
				if ptsz && (kind != "async" || api == "symbols") {
					continue
				}
				args := []string{"--api", api, "--alloc", kind}
				if ptsz {
					args = append(args, "--ptsz")
				}
				name := fmt.Sprintf("%s/%s/ptsz=%v", api, kind, ptsz)
				if r := e.probe(e.limited(), "hamicore-allocprobe", append(args, "--mib", "4096")...); !refused(r) {
					t.Errorf("%s: 4096 MiB: %+v, want refused", name, r)
				}
				if r := e.probe(e.limited(), "hamicore-allocprobe", append(args, "--mib", "2048")...); !granted(r) || r.TotalMiB != 3000 || r.FreeMiB != 3000-2048 {
					t.Errorf("%s: 2048 MiB: %+v, want granted with total 3000, free 952", name, r)
				}
				// Frees are accounted: 3 x 1000 MiB in a row fit only if each one was released.
				for i := 0; i < 3; i++ {
					if r := e.probe(e.limited(), "hamicore-allocprobe", append(args, "--mib", "2900", "--chunk-mib", "100")...); !granted(r) {
						t.Fatalf("%s: round %d 2900 MiB in 100 MiB chunks: %+v (a free was not accounted?)", name, i, r)
					}
				}
			}
		}
	}
	reg := e.dump()
	if d := reg.device(0); d.UsedBytes != 0 || d.LimitBytes != 3000*mib || reg.Layout.Name != "limitbed" {
		t.Errorf("after all processes freed everything: device 0 = %+v, want limit 3000 MiB and nothing used (%+v)", d, reg)
	}
}

// Two processes share the pod's usage.cache: 2000 + 2000 MiB under 3000 MiB is refused; once the
// first is SIGKILLed (no cleanup at all), a third process gets its memory.
func TestTwoProcessesShareUsageCache(t *testing.T) {
	e := newEnv(t)
	first, lines := e.start(e.limited(), "hamicore-allocprobe", "--mib", "2000", "--hold", "60")
	if r := parseProbe(t, nextLine(t, lines))[0]; !granted(r) {
		t.Fatalf("first process: %+v", r)
	}
	reg := e.dump()
	if len(reg.Slots) != 1 || reg.Slots[0].Pid != first.Process.Pid || !reg.Slots[0].Alive || reg.Slots[0].Used[0] != 2000*mib {
		t.Fatalf("region after the first process: %+v", reg)
	}
	if r := e.probe(e.limited(), "hamicore-allocprobe", "--mib", "2000"); !refused(r) {
		t.Fatalf("second process 2000 MiB while the first holds 2000 MiB: %+v, want refused", r)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	if r := e.probe(e.limited(), "cudaprobe", "--mib", "2000"); !granted(r) {
		t.Fatalf("third process after SIGKILL of the first: %+v, want granted", r)
	}
}

// Threads allocating concurrently never exceed the limit, within one process and across two.
func TestConcurrentThreadsNeverExceed(t *testing.T) {
	e := newEnv(t)
	procs := make([]*exec.Cmd, 2)
	outs := make([]*bytes.Buffer, 2)
	for i := range procs {
		procs[i] = e.cmd(e.limited("LIBCUDA_LOG_LEVEL=1"), "hamicore-allocprobe", "--mib", "6000", "--chunk-mib", "50", "--threads", "16", "--hold", "2")
		outs[i] = &bytes.Buffer{}
		procs[i].Stdout = outs[i]
		if err := procs[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		r := parseProbe(t, outs[i].String())[0]
		total += r.GrantedMiB
	}
	if total > 3000 {
		t.Fatalf("two processes x 16 threads were granted %d MiB under a 3000 MiB limit", total)
	}
	if total < 2000 {
		t.Errorf("only %d MiB granted under a 3000 MiB limit: reservations too conservative", total)
	}
}

// A forked child is accounted as its own process (own slot, own pid), against the same limit.
func TestForkedChildOwnSlot(t *testing.T) {
	e := newEnv(t)
	c, lines := e.start(e.limited(), "hamicore-allocprobe", "--mib", "1000", "--fork-mib", "1500", "--hold", "3")
	rs := parseProbe(t, nextLine(t, lines)+"\n"+nextLine(t, lines))
	if len(rs) != 2 || !granted(rs[0]) || !granted(rs[1]) || rs[0].Pid == rs[1].Pid {
		t.Fatalf("parent/child: %+v", rs)
	}
	reg := e.dump()
	pids := map[int]uint64{}
	for _, s := range reg.Slots {
		pids[s.Pid] = s.Used[0]
	}
	if pids[rs[0].Pid] != 1000*mib || pids[rs[1].Pid] != 1500*mib {
		t.Fatalf("slots %v, want parent %d with 1000 MiB and child %d with 1500 MiB", pids, rs[0].Pid, rs[1].Pid)
	}
	c.Wait()
	// Over the limit together: the child is refused.
	if rs := parseProbe(t, func() string {
		o, _ := e.run(e.limited(), "hamicore-allocprobe", "--mib", "1000", "--fork-mib", "2500")
		return o
	}()); len(rs) != 2 || !refused(rs[1]) {
		t.Fatalf("child 2500 MiB next to the parent's 1000 MiB: %+v, want refused", rs)
	}
}

// CUDA_DISABLE_CONTROL is the device plugin's business (it leaves out the preload mount, read from
// the pod spec), as upstream: the library does not read it, so a process that sets it stays capped.
func TestDisableControlIgnoredByLibrary(t *testing.T) {
	e := newEnv(t)
	if r := e.probe(e.limited("CUDA_DISABLE_CONTROL=true"), "hamicore-allocprobe", "--mib", "4096"); !refused(r) || r.TotalMiB != 3000 {
		t.Fatalf("CUDA_DISABLE_CONTROL=true in the environment: %+v, want 4096 MiB refused under 3000 MiB", r)
	}
}

// start runs a long-lived probe; its stdout lines arrive on the channel.
func (e *env) start(environ []string, bin string, args ...string) (*exec.Cmd, <-chan string) {
	e.t.Helper()
	c := e.cmd(environ, bin, args...)
	lines := startLines(e.t, c)
	e.t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c, lines
}

// startLines starts c; its stdout lines arrive on the channel, closed when the output ends.
func startLines(t *testing.T, c *exec.Cmd) <-chan string {
	t.Helper()
	pipe, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("probe exited without output")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the probe")
	}
	return ""
}

// The device an allocation is charged to follows the thread's current context: the library
// caches it per thread and must notice cuCtxSetCurrent (two devices, 3000 MiB and 1000 MiB).
func TestChargedDeviceFollowsContextSwitch(t *testing.T) {
	e := newEnv(t)
	environ := e.limited("CUDA_DEVICE_MEMORY_LIMIT_1=1000m", "FAKEGPU_PROFILE=2x-a16-16q",
		"FAKEGPU_PROFILE_DIR="+filepath.Join(e.p.Root, "fakegpu", "profiles"))
	for _, api := range []string{"symbols", "procaddress"} {
		out, _ := e.run(environ, "hamicore-allocprobe", "--api", api, "--device", "0", "--mib", "2000", "--then-device", "1", "--then-mib", "2000")
		if rs := parseProbe(t, out); len(rs) != 2 || !granted(rs[0]) || !refused(rs[1]) || rs[1].TotalMiB != 1000 {
			t.Errorf("%s: 2000 MiB on device 0, then 2000 MiB on device 1 (limit 1000m): %+v, want granted then refused", api, rs)
		}
		out, _ = e.run(environ, "hamicore-allocprobe", "--api", api, "--device", "1", "--mib", "500", "--then-device", "0", "--then-mib", "2500")
		if rs := parseProbe(t, out); len(rs) != 2 || !granted(rs[0]) || !granted(rs[1]) || rs[1].TotalMiB != 3000 {
			t.Errorf("%s: 500 MiB on device 1, then 2500 MiB on device 0 (limit 3000m): %+v, want both granted", api, rs)
		}
	}
}
