package hamicore_test

// Each class of escape the memory judge (harness/memjudge) stands for, reproduced on its own: a
// test that failed on the library before the class was closed (docs/attacks.md, "Memory
// accounting").

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/internal/tier"
)

// twoGPUs: a pod with two GPUs of different limits (3000 MiB on the first, 1000 MiB on the
// second), in the limits file's order (NVML's, PCI order).
func (e *env) twoGPUs(extra ...string) []string {
	return e.limited(append([]string{"CUDA_DEVICE_MEMORY_LIMIT_1=1000m", "FAKEGPU_PROFILE=2x-a16-16q",
		"FAKEGPU_PROFILE_DIR=" + filepath.Join(e.p.Root, "fakegpu", "profiles")}, extra...)...)
}

// Accounting is by physical GPU: CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) renumber the
// process's CUDA ordinals, which must not move a GPU's memory to another GPU's counter and limit.
// Before: with CUDA_VISIBLE_DEVICES=1,0 the second GPU's memory was charged to the first GPU's
// 3000 MiB limit (2000 MiB granted on a 1000 MiB GPU).
func TestEscapeOrdinalIsNotTheGPU(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		cvd, device string
		mib         int
		want        bool // granted
		total       int
	}{
		{"1,0", "0", 2000, false, 1000}, // ordinal 0 is the second GPU
		{"1", "0", 2000, false, 1000},
		{"1,0", "1", 2000, true, 3000}, // ordinal 1 is the first GPU
		{"", "1", 2000, false, 1000},
		{"", "0", 2000, true, 3000},
	} {
		environ := e.twoGPUs()
		if tc.cvd != "" {
			environ = append(environ, "CUDA_VISIBLE_DEVICES="+tc.cvd)
		}
		r := e.probe(environ, "cudaprobe", "--device", tc.device, "--mib", "2000")
		if (tc.want && !granted(r)) || (!tc.want && !refused(r)) || r.TotalMiB != tc.total {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q, ordinal %s, 2000 MiB: %+v, want granted=%v of a %d MiB device",
				tc.cvd, tc.device, r, tc.want, tc.total)
		}
	}
	// Two processes that number the GPUs differently share each GPU's one counter.
	first, lines := e.start(e.twoGPUs("CUDA_VISIBLE_DEVICES=1,0"), "cudaprobe", "--device", "0", "--mib", "800", "--hold", "30")
	if r := parseProbe(t, nextLine(t, lines))[0]; !granted(r) {
		t.Fatalf("800 MiB on the second GPU (ordinal 0 of CUDA_VISIBLE_DEVICES=1,0): %+v", r)
	}
	if r := e.probe(e.twoGPUs(), "cudaprobe", "--device", "1", "--mib", "400"); !refused(r) {
		t.Errorf("400 MiB more on the second GPU (its ordinal 1 here) while another process holds 800 of its 1000 MiB: %+v, want refused", r)
	}
	if r := e.probe(e.twoGPUs(), "cudaprobe", "--device", "0", "--mib", "2800"); !granted(r) {
		t.Errorf("2800 MiB on the first GPU while the second holds 800 MiB: %+v, want granted (different GPUs)", r)
	}
	first.Process.Kill()
	first.Wait()
}

// memload drives harness/memjudge's workload interactively: one command, one reply.
type memload struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines <-chan string
	pid   int
}

func (e *env) memload(environ []string) *memload {
	e.t.Helper()
	c := e.cmd(environ, "memload")
	in, err := c.StdinPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var errb bytes.Buffer
	c.Stderr = &errb
	lines := startLines(e.t, c)
	e.t.Cleanup(func() {
		in.Close()
		c.Process.Kill()
		c.Wait()
		if e.t.Failed() && errb.Len() > 0 {
			e.t.Logf("memload %d stderr:\n%s", c.Process.Pid, errb.String())
		}
	})
	m := &memload{t: e.t, cmd: c, in: in, lines: lines}
	if _, err := fmt.Sscanf(nextLine(e.t, lines), "hello %d", &m.pid); err != nil {
		e.t.Fatalf("memload greeting: %v", err)
	}
	return m
}

// do sends one command and returns the reply ("ok ..." or "err CODE ...").
func (m *memload) do(format string, args ...any) string {
	m.t.Helper()
	cmd := fmt.Sprintf(format, args...)
	if _, err := io.WriteString(m.in, cmd+"\n"); err != nil {
		m.t.Fatalf("memload %q: %v", cmd, err)
	}
	return nextLine(m.t, m.lines)
}

// must: the command succeeds.
func (m *memload) must(format string, args ...any) string {
	m.t.Helper()
	r := m.do(format, args...)
	if !strings.HasPrefix(r, "ok") {
		m.t.Fatalf("memload %q: %s", fmt.Sprintf(format, args...), r)
	}
	return r
}

const oom = "err 2" // CUDA_ERROR_OUT_OF_MEMORY

// truth: what the fake driver records the pod's processes holding on each GPU (fakegpu's
// fgtruth), beyond one context per process and GPU.
func (e *env) truth(environ []string) []uint64 {
	e.t.Helper()
	out, _ := e.run(environ, "fgtruth")
	var tr struct {
		Units []struct {
			Used uint64 `json:"used"`
		} `json:"units"`
		Procs []struct {
			Ctx []uint64 `json:"ctx"`
		} `json:"procs"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		e.t.Fatalf("fgtruth: %v\n%s", err, out)
	}
	held := make([]uint64, len(tr.Units))
	for u := range tr.Units {
		held[u] = tr.Units[u].Used
		for _, p := range tr.Procs {
			held[u] -= min(p.Ctx[u], 300*mib)
		}
	}
	return held
}

// Liveness survives any descriptor operation of the program: a process that opens and closes
// usage.cache (which drops every POSIX lock it holds on the file) or closes every descriptor it
// did not open must still count as alive, or the next process that is refused reclaims its slot
// and the pod's total restarts from 0. Before: 2000 MiB granted next to a live 2000 MiB.
func TestEscapeLivenessSurvivesDescriptors(t *testing.T) {
	for _, op := range []string{"closecache", "closeall"} {
		t.Run(op, func(t *testing.T) {
			e := newEnv(t)
			a := e.memload(e.limited())
			a.must("init 0")
			a.must("alloc 1 mem %d", 2000*mib)
			if op == "closecache" {
				a.must("closecache %s", e.cache)
			} else {
				a.must("closeall")
			}
			b := e.memload(e.limited())
			b.must("init 0")
			if r := b.do("alloc 1 mem %d", 2000*mib); r != oom {
				t.Fatalf("2000 MiB next to a live process holding 2000 MiB (after it ran %s): %q, want refused", op, r)
			}
			if held := e.truth(e.limited()); held[0] > 3000*mib {
				t.Fatalf("the pod holds %d MiB under a 3000 MiB limit", held[0]/mib)
			}
			// A process that really died gives its memory back.
			a.cmd.Process.Kill()
			a.cmd.Wait()
			b.must("alloc 2 mem %d", 2000*mib)
		})
	}
}

// The region's stamped limit is the container's to rewrite; a process never enforces a looser
// limit than its own: before, mem_limit[0] rewritten to "unlimited" let 4096 MiB through.
func TestEscapeRegionLimitRewrite(t *testing.T) {
	e := newEnv(t)
	a := e.memload(e.limited())
	a.must("init 0")
	a.must("alloc 1 mem %d", 100*mib)
	f, err := os.OpenFile(e.cache, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 8), 64); err != nil { // mem_limit[0]
		t.Fatal(err)
	}
	f.Close()
	for _, m := range []*memload{a, e.memload(e.limited())} {
		m.do("init 0")
		if r := m.do("alloc 9 mem %d", 4096*mib); r != oom {
			t.Errorf("pid %d: 4096 MiB after the region's limit was rewritten to unlimited: %q, want refused (its own limit is 3000 MiB)", m.pid, r)
		}
	}
	if r := e.probe(e.limited(), "cudaprobe", "--mib", "100"); r.TotalMiB != 3000 {
		t.Errorf("cuMemGetInfo after the rewrite: %+v, want the process's own 3000 MiB", r)
	}
}

// CUDA devices 16 and up (MIG instances of a 3-GPU node, 21 ordinals) are charged to their GPU
// like the others. Before: an ordinal >= 16 was passed through uncharged, and MIG instances were
// charged to the limit of the GPU whose index equals their ordinal.
func TestEscapeDeviceSixteenAndUp(t *testing.T) {
	e := newEnv(t)
	environ := e.limited("FAKEGPU_PROFILE="+mig21Profile(t), "CUDA_DEVICE_MEMORY_LIMIT_1=5000m", "CUDA_DEVICE_MEMORY_LIMIT_2=1000m")
	m := e.memload(environ)
	if r := m.do("init 20"); !strings.HasPrefix(r, "ok") {
		t.Fatalf("the profile does not have 21 CUDA devices: init 20: %q", r)
	}
	m.must("alloc 1 mem %d", 800*mib)
	if r := m.do("alloc 2 mem %d", 800*mib); r != oom {
		t.Errorf("ordinal 20 (a MIG instance of the third GPU, limit 1000 MiB): a second 800 MiB: %q, want refused", r)
	}
	m.must("use 0") // a MIG instance of the first GPU (limit 3000 MiB)
	if r := m.do("alloc 3 mem %d", 2000*mib); !strings.HasPrefix(r, "ok") {
		t.Errorf("ordinal 0 (the first GPU): 2000 MiB under 3000 MiB: %q, want granted", r)
	}
}

// A compute-limited container's launches on CUDA device 16 and up (past the launch gates' 16
// ordinals) are refused with CUDA_ERROR_NOT_PERMITTED and a log line saying why, kernels and
// graphs alike; device 0 is held as ever. Before: they passed ungated, the GPU 1.00 busy under
// a 30 % limit. Without a compute limit nothing is gated and they run.
func TestEscapeComputeOnDeviceSixteenAndUp(t *testing.T) {
	e := newEnv(t)
	prof := "FAKEGPU_PROFILE=" + mig21Profile(t)
	limited := e.limited(prof, "CUDA_DEVICE_SM_LIMIT=30", "GPU_CORE_UTILIZATION_POLICY=force")
	for _, w := range []string{"uniform", "graph"} {
		c := e.cmd(limited, "hamicore-launchprobe", "--seconds", "0.5", "--workload", w, "--device", "20", "--kernel-us", "1000")
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		_ = c.Run() // exits 1 on a launch error: judged by its report
		r, err := computebench.ParseProbe(out.Bytes())
		if err == nil || r.LaunchError != 800 || r.Launches != 0 || !strings.Contains(errb.String(), "CUDA device 20: past the 16 devices") {
			t.Errorf("%s on device 20 under a 30 %% limit: %+v (%v), want every launch refused with 800 and the log naming the device\nstderr: %s",
				w, r, err, errb.String())
		}
	}
	out, _ := e.run(limited, "hamicore-launchprobe", "--seconds", "4", "--device", "0", "--kernel-us", "1000")
	if r, err := computebench.ParseProbe([]byte(out)); err != nil || len(r.Windows) <= computebench.SkipWindows ||
		computebench.Steady(r.Windows) > 0.45 {
		t.Errorf("device 0 under a 30 %% limit: %+v (%v), want held after its first 2 s", r, err)
	}
	other := newEnv(t) // another pod: the region keeps its first process's limits
	out, _ = other.run(other.limited(prof), "hamicore-launchprobe", "--seconds", "1.5", "--device", "20", "--kernel-us", "1000")
	if r, err := computebench.ParseProbe([]byte(out)); err != nil || r.Launches == 0 {
		t.Errorf("device 20 without a compute limit: %+v (%v), want its launches made", r, err)
	}
}

// mig21Profile writes a fakegpu profile of three A100s in MIG mode with seven instances each: 21
// CUDA devices.
func mig21Profile(t *testing.T) string {
	var prof strings.Builder
	prof.WriteString("driver_version = 550.90.07\ncuda_version = 12040\ncontext_mib = 300\n")
	for d := 0; d < 3; d++ {
		fmt.Fprintf(&prof, "\ndevice = %d\nname = NVIDIA A100-SXM4-40GB\nuuid = GPU-5d5e6f70-1a2b-4c3d-8e9f-0a1b2c3d4e5%d\n"+
			"memory_mib = 40960\npci_bus_id = 00000000:0%d:00.0\npci_device_id = 0x20B010DE\narchitecture = ampere\n"+
			"compute_capability = 8.0\nsm_count = 108\nmig_mode = enabled\n", d, d, d+1)
		for i := 0; i < 7; i++ {
			fmt.Fprintf(&prof, "mig = %d\nmig_profile = 1g.5gb\nmig_uuid = MIG-5d5e6f70-1a2b-4c3d-8e9f-0a1b2c3d4%d%d%d\n"+
				"mig_memory_mib = 4864\nmig_gpu_instance_id = %d\nmig_compute_instance_id = 0\nmig_sm_count = 14\n", i, d, i, d, i+7)
		}
	}
	path := filepath.Join(t.TempDir(), "mig21.profile")
	if err := os.WriteFile(path, []byte(prof.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// /overrideEnv present but unreadable is not "no file": a login session (no environment) whose
// /overrideEnv cannot be read must refuse, with an error naming the cause — only its absence means
// environment mode. Before: a directory, or a file the process may not read, fell back to the
// environment, which in a login session is no limit at all (4096 MiB granted).
func TestEscapeOverrideEnvUnreadable(t *testing.T) {
	tier.Require(t, tier.Root.For("unshare -m and mounts (a login session in a private mount namespace)"))
	e := newEnv(t)
	probe := filepath.Join(e.p.Bin, "hamicore-allocprobe")
	for _, tc := range []struct{ name, setup, want string }{
		{"directory", "rm -f /overrideEnv && mkdir /overrideEnv && exec env -i " + probe + " --mib 4096", "not a regular file"},
		{"no permission", "chmod 000 /overrideEnv && chmod 0777 " + e.pod + " && exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i " +
			probe + " --mib 4096", "Permission denied"},
	} {
		limits := filepath.Join(t.TempDir(), "limits")
		if err := os.WriteFile(limits, []byte(e.podLimits()), 0o644); err != nil {
			t.Fatal(err)
		}
		c := exec.Command(filepath.Join(e.p.Root, "hamicore", "test", "privatens"), "--preload", filepath.Join(e.p.Lib, "libvgpu.so"),
			"--override-env", limits, "--file", "/etc/fakegpu/profile="+filepath.Join(e.p.Root, "fakegpu", "profiles", "a16-16q.profile"),
			"--bind", e.p.Out, "--bind", filepath.Dir(e.pod), "--", "/bin/sh", "-c", tc.setup)
		c.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		var errb strings.Builder
		c.Stderr = &errb
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, errb.String())
		}
		r := parseProbe(t, string(out))[0]
		if !refused(r) || !strings.Contains(errb.String(), "/overrideEnv") || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%s /overrideEnv, login session, 4096 MiB: %+v, want refused with an error naming /overrideEnv and %q\nstderr: %s",
				tc.name, r, tc.want, errb.String())
		}
	}
}

// A signal handler that allocates while its thread is inside one of the library's driver calls
// (here a cuMemAlloc that fakegpu keeps 30 ms in the driver) is checked like any allocation —
// refused, since it cannot be charged safely there — never passed through uncharged. Before:
// four handler allocations of 1 GiB granted under a 3000 MiB limit.
func TestEscapeSignalHandlerInsideAHook(t *testing.T) {
	e := newEnv(t)
	m := e.memload(e.limited())
	m.must("init 0")
	r := m.must("sigalloc %d 4", 1024*mib)
	var granted, refusedN int
	fmt.Sscanf(r, "ok %d %d", &granted, &refusedN)
	if held := e.truth(e.limited()); held[0] > 3000*mib || granted+refusedN != 4 {
		t.Fatalf("signal handlers allocating 4 x 1 GiB inside a hook: %q; the pod holds %d MiB under a 3000 MiB limit", r, held[0]/mib)
	}
	m.must("sigfree")
	m.must("alloc 1 mem %d", 2900*mib) // and nothing stayed charged
}

// fork serves a child the memload forks (without exec) over a Unix socket.
func (m *memload) fork(dir string) *memload {
	m.t.Helper()
	sock := filepath.Join(dir, "fork.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		m.t.Fatal(err)
	}
	defer ln.Close()
	m.must("fork %s", sock)
	c, err := ln.Accept()
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { c.Close() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	child := &memload{t: m.t, in: c, lines: lines}
	if _, err := fmt.Sscanf(nextLine(m.t, lines), "hello %d", &child.pid); err != nil {
		m.t.Fatalf("forked memload greeting: %v", err)
	}
	m.t.Cleanup(func() { syscall.Kill(child.pid, syscall.SIGKILL) })
	return child
}

// A forked child's first context reset (or destroy) frees what the child made, never what its
// parent did: the child inherits the parent's tables, and even the same context handles. Found by
// the memory judge (seed 69): before, the child's cuDevicePrimaryCtxReset took the parent's
// 2000 MiB off the pod's counter, and 2000 MiB more were granted under 3000 MiB.
func TestEscapeForkedChildResetKeepsParentCharges(t *testing.T) {
	e := newEnv(t)
	a := e.memload(e.limited())
	a.must("init 0")
	a.must("alloc 1 mem %d", 2000*mib)
	c := a.fork(t.TempDir())
	c.must("reset 0")
	if r := c.do("alloc 1 mem %d", 2000*mib); r != oom {
		t.Fatalf("2000 MiB in a forked child after its reset, next to its parent's 2000 MiB: %q, want refused", r)
	}
	if held := e.truth(e.limited()); held[0] > 3000*mib {
		t.Fatalf("the pod holds %d MiB under a 3000 MiB limit", held[0]/mib)
	}
}

// A descriptor table that is full once must not leave a process without a description of the
// region for good: without one it cannot tell a dead process from a live one (every slot reads
// as alive), so a dead process's memory is never given back and a legal allocation is refused;
// a child it forks has none either and charges outside any slot. Found by the memory judge
// (seed 217: a process that closed every descriptor, filled the table and forked). Before: the
// dead process's 2000 MiB stayed charged and 2000 MiB were refused under a 3000 MiB limit.
func TestEscapeDescriptorLostWhileTableFull(t *testing.T) {
	e := newEnv(t)
	a := e.memload(e.limited())
	a.must("init 0")
	a.must("alloc 1 mem %d", 200*mib)
	a.must("closeall")                                   // its descriptor of usage.cache is gone; the number is free again
	a.must("exhaust")                                    // and taken by something else
	if r := a.do("alloc 2 mem %d", 2900*mib); r != oom { // refused: looks for dead processes
		t.Fatalf("2900 MiB next to 200 MiB under a 3000 MiB limit: %q, want refused", r)
	}
	a.must("unexhaust")
	b := e.memload(e.limited())
	b.must("init 0")
	b.must("alloc 1 mem %d", 2000*mib)
	b.cmd.Process.Kill()
	b.cmd.Wait()
	if r := a.do("alloc 3 mem %d", 2000*mib); !strings.HasPrefix(r, "ok") {
		t.Fatalf("2000 MiB next to 200 MiB once the process holding 2000 MiB died: %q, want granted", r)
	}
	if held := e.truth(e.limited()); held[0] > 3000*mib {
		t.Fatalf("the pod holds %d MiB under a 3000 MiB limit", held[0]/mib)
	}
}

// held checks the pod's record: no more than limit MiB on the first GPU beyond one context per
// process.
func (e *env) heldWithin(t *testing.T, environ []string, limitMiB uint64, what string) {
	t.Helper()
	if held := e.truth(environ); held[0] > limitMiB*mib {
		t.Fatalf("%s: the pod holds %d MiB under a %d MiB limit", what, held[0]/mib, limitMiB)
	}
}

// Memory another process imports is charged to it: legacy IPC handles (cuIpcOpenMemHandle) and
// VMM allocations exported as a file descriptor (cuMemImportFromShareableHandle). The driver
// keeps the memory while the importer holds it, after the exporter freed it. Before: the import
// was not charged, the exporter's free took the 1200 MiB off the pod's counter while the importer
// still held them, and 2000 MiB more were granted under 3000 MiB.
func TestEscapeImportedMemory(t *testing.T) {
	for _, how := range []string{"ipc", "vmm"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			a := e.memload(e.limited())
			b := e.memload(e.limited())
			a.must("init 0")
			b.must("init 0")
			if how == "ipc" {
				a.must("alloc 1 mem %d", 1200*mib)
				hex := strings.TrimPrefix(a.must("ipcget 1"), "ok ")
				b.must("ipcopen 2 %s", hex)
			} else {
				a.must("alloc 1 vmmx %d", 1200*mib)
				var pid, fd int
				if _, err := fmt.Sscanf(a.must("vmmexport 1"), "ok %d %d", &pid, &fd); err != nil {
					t.Fatal(err)
				}
				b.must("vmmimport 2 %d %d %d", pid, fd, 1200*mib)
			}
			a.must("free 1") // the importer still holds it
			if r := b.do("alloc 3 mem %d", 2000*mib); r != oom {
				t.Errorf("2000 MiB next to an imported 1200 MiB the exporter freed: %q, want refused", r)
			}
			e.heldWithin(t, e.limited(), 3000, how+" import")
			b.must("free 2") // closed: given back
			b.must("alloc 3 mem %d", 2000*mib)
		})
	}
}

// The legacy (CUDA < 3.2) entry points an old binary, or cuGetProcAddress at an old version,
// reaches: cuMemAllocPitch, cuArrayCreate, cuArray3DCreate with 32-bit sizes (their pointers live
// below 4 GiB, so 3 x 1100 MiB fit the driver). Before: not interposed, 3300 MiB granted under
// 3000 MiB.
func TestEscapeLegacyEntryPoints(t *testing.T) {
	for _, kind := range []string{"pitch1", "array1", "array3d1"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			m := e.memload(e.limited())
			m.must("init 0")
			m.must("alloc 1 %s %d", kind, 1100*mib)
			m.must("alloc 2 %s %d", kind, 1100*mib)
			if r := m.do("alloc 3 %s %d", kind, 1100*mib); r != oom {
				t.Errorf("a third 1100 MiB through the v1 entry point under 3000 MiB: %q, want refused", r)
			}
			e.heldWithin(t, e.limited(), 3000, kind)
			m.must("free 1")
			m.must("alloc 3 %s %d", kind, 1100*mib) // freed through the same table
		})
	}
}

// Device memory a program chooses without allocating it: cuCtxSetLimit's malloc heap and stack
// (the stack of every thread the GPU can hold), and the globals of a module. Before: not charged,
// so 2500 MiB of heap (or stack, or a module's __device__ array) plus 2000 MiB were granted under
// 3000 MiB.
func TestEscapeProgramChosenDeviceMemory(t *testing.T) {
	for _, kind := range []string{"heap", "stack", "module"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			m := e.memload(e.limited())
			m.must("init 0")
			m.must("alloc 1 %s %d", kind, 2500*mib)
			if r := m.do("alloc 2 mem %d", 2000*mib); r != oom {
				t.Errorf("2000 MiB next to %d MiB of %s: %q, want refused", 2500, kind, r)
			}
			e.heldWithin(t, e.limited(), 3000, kind)
		})
	}
}

// A process gets one context per GPU within the documented allowance; every further live context
// costs the driver another context's memory and is charged (LB_CTX_CHARGE, 1 GiB). Before:
// contexts were free: with 2500 MiB allocated, three more contexts (300 MiB each on fakegpu) put
// the pod at 3400 MiB beyond its one context under 3000 MiB.
func TestEscapeExtraContexts(t *testing.T) {
	e := newEnv(t)
	m := e.memload(e.limited())
	m.must("init 0")
	m.must("alloc 1 mem %d", 2500*mib)
	for i := 2; i <= 4; i++ {
		if r := m.do("ctxcreate %d 0", i); r != oom {
			t.Errorf("context %d next to 2500 MiB under 3000 MiB: %q, want refused", i, r)
		}
	}
	e.heldWithin(t, e.limited(), 3000, "created contexts")
	m.must("use 0")
	m.must("free 1")
	m.must("ctxcreate 5 0") // 1 GiB charged: fits now
	m.must("free 5")
}

// Every fixed table of the library refuses when full, never passes memory through uncharged.
// Graphs of more than 1024 nodes: before, a graph of 1030 allocation nodes was not charged at all
// before its launch: 4000 MiB granted under 3000 MiB.
func TestEscapeTablesFull(t *testing.T) {
	e := newEnv(t)
	m := e.memload(e.limited())
	m.must("init 0")
	if r := m.do("graph 1 1030 %d 0", 4000*mib); r != oom {
		t.Errorf("a graph of 1030 allocation nodes, 4000 MiB under 3000 MiB: %q, want refused", r)
	}
	e.heldWithin(t, e.limited(), 3000, "graph of 1030 nodes")
	m.must("graph 2 1030 %d 0", 2060*mib) // within the limit: granted
}

// A child forked while its parent's descriptor table was full shares the parent's open file
// description until it can open one of its own; a slot lock it took through that description
// would read as no lock to the parent (a description never conflicts with itself), and the
// parent's next refused allocation would reclaim the living child's slot. Found by the memory
// judge (seed 2599). Before: the child's 1500 MiB were taken off the pod's counter and the
// parent got 1000 MiB more, 3500 MiB under a 3000 MiB limit.
func TestEscapeChildForkedWithFullTable(t *testing.T) {
	e := newEnv(t)
	a := e.memload(e.limited())
	a.must("init 0")
	a.must("alloc 1 mem %d", 1000*mib)
	a.must("exhaust")
	c := a.fork(t.TempDir()) // memload's child gives the parent's hoard back, then fills its own
	c.must("init 0")
	c.must("exhaust")
	c.must("alloc 1 mem %d", 1500*mib)
	if r := a.do("alloc 2 mem %d", 1000*mib); r != oom {
		t.Errorf("1000 MiB next to the parent's 1000 and its living child's 1500 MiB: %q, want refused", r)
	}
	e.heldWithin(t, e.limited(), 3000, "a parent and a child forked with a full table")
}

// A signal handler that allocates while its thread is inside the library's own work — holding
// one of its locks, or inside its one-time clearing of a forked child's tables — before or after
// the driver call: the handler's call must be refused there, not wait for the lock (or the once)
// its own thread holds, forever. Found by the memory judge's soak (seed 3003: a forked child's
// first allocation, a signal 10 ms in, on a loaded machine). Here a signal every 50 µs lands in
// every part of a forked child's first allocations. Before: the child hung.
func TestEscapeSignalHandlerInsideLibraryLock(t *testing.T) {
	e := newEnv(t)
	a := e.memload(e.limited())
	a.must("init 0")
	a.must("alloc 1 mem %d", 100*mib)
	for i := 0; i < 4; i++ {
		c := a.fork(t.TempDir())
		c.must("sigalloc %d 3 50", 2*mib) // its first allocations: tables cleared, a slot claimed
		c.must("sigfree")
		c.must("init 0")
		c.must("alloc 1 mem %d", 100*mib)
	}
	e.heldWithin(t, e.limited(), 3000, "signal handlers in forked children")
}
