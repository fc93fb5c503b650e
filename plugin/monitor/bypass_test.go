package monitor

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/internal/cbuild"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/gpu/fakenvml"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

const a16UUID = "GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50"

// bypassNode is a node of real processes on fakegpu: each "container" is a cache directory and a
// runtime ID; its processes run under the real libvgpu.so with its limit. The processes run on the
// host, so the cgroup that maps them to their container is played by a /proc of the test's own
// (stat and status copied from the real /proc: the start times are the kernel's).
type bypassNode struct {
	t       *testing.T
	p       cbuild.Paths
	dir     string // the containers directory
	proc    string
	ids     staticIdentity
	procs   map[*exec.Cmd]bool
	limitOf map[string]string
}

func newBypassNode(t *testing.T) *bypassNode {
	n := &bypassNode{t: t, p: cbuild.Build(t), dir: t.TempDir(), proc: t.TempDir(), procs: map[*exec.Cmd]bool{}, limitOf: map[string]string{}}
	t.Cleanup(func() {
		for c := range n.procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	return n
}

// container adds a container with a memory limit on the node's one GPU.
func (n *bypassNode) container(uid, cid string, limitMiB uint64) {
	n.ids.cs = append(n.ids.cs, gpuContainer(uid, cid, limitMiB, a16UUID))
	if err := os.MkdirAll(filepath.Join(n.dir, uid+"_main"), 0o755); err != nil {
		n.t.Fatal(err)
	}
	n.limitOf[uid] = strconv.FormatUint(limitMiB, 10) + "m"
}

// hold starts cudaprobe in container uid holding mib through api; preload is the process's
// LD_PRELOAD (libvgpu.so for an honest process). It returns once the allocation is reported.
func (n *bypassNode) hold(t *testing.T, uid, cid, preload, api string, mib int) *exec.Cmd {
	t.Helper()
	c := exec.Command(filepath.Join(n.p.Bin, "cudaprobe"), "--mib", strconv.Itoa(mib), "--api="+api, "--hold-until-signal")
	c.Env = append(os.Environ(), "LD_PRELOAD="+preload, "LD_LIBRARY_PATH="+n.p.Lib,
		"CUDA_DEVICE_MEMORY_LIMIT_0="+n.limitOf[uid], "CUDA_DEVICE_MEMORY_SHARED_CACHE="+filepath.Join(n.dir, uid+"_main", paths.UsageCacheName))
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	n.procs[c] = true
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, fmt.Sprintf(`"granted_mib":%d`, mib)) {
		t.Fatalf("%s via %s: %q %v", uid, api, line, err)
	}
	mirrorProc(t, n.proc, c.Process.Pid, "0::/system.slice/docker-"+cid+".scope\n")
	return c
}

// mirrorProc gives a real process an entry in a /proc of the test's own: its stat and status
// copied (the kernel's start time and PIDs) and the cgroup file its container would have.
func mirrorProc(tb testing.TB, root string, pid int, cgroup string) {
	tb.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, f := range []string{"stat", "status"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), f))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// alive reports whether c still runs (not yet waited for).
func alive(c *exec.Cmd) bool { return c.Process.Signal(syscall.Signal(0)) == nil }

// TestAccountingCatchesBypasses: the real library is bypassed by LD_PRELOAD of the driver,
// glibc's own dlsym (dlvsym) and a new link namespace (dlmopen), and fooled by a region whose
// counters root in the container rewrote; each time the container's processes end up
// holding more than its 3000 MiB limit. The driver's list, read through fakegpu's real
// NVML, shows it: within one pass the container is over; with enforcement kill the offending process alone is SIGKILLed,
// the container's honest process and the neighbour keep running.
func TestAccountingCatchesBypasses(t *testing.T) {
	lister := fakeDriverLister(t)
	n := newBypassNode(t)
	n.container(uidT, cidT, 3000)
	n.container(uidN, cidN, 2000)
	vgpu := filepath.Join(n.p.Lib, "libvgpu.so")
	honestProc := n.hold(t, uidT, cidT, vgpu, "symbols", 1000)
	neighbourProc := n.hold(t, uidN, cidN, vgpu, "symbols", 1000)
	events := &fakeEvents{}
	a := &Accounting{Driver: lister, Identity: n.ids, Dir: n.dir, ProcRoot: n.proc, ContextAllowance: 512 << 20,
		Enforcement: v1.EnforcementKill, Killer: PidfdKiller{ProcRoot: n.proc}, Events: events, Logger: klog.Background()}
	cache := filepath.Join(n.dir, uidT+"_main", paths.UsageCacheName)
	// The counters' rewrite lets a process through the library up to the limit whatever the
	// others hold (1000 + 2500 MiB under 3000). The limit's no longer does (the library enforces
	// its own limit, whatever the region says): TestAccountingRegionLimitRewrite.
	for _, c := range []struct {
		name, preload, api, cause string
		mib                       int
		rewrite                   func(t *testing.T)
	}{
		{"LD_PRELOAD of the driver", filepath.Join(n.p.Lib, "libcuda.so.1") + ":" + vgpu, "symbols", "does not go through libvgpu.so", 4096, nil},
		{"glibc's own dlsym", vgpu, "dlvsym", "does not go through libvgpu.so", 4096, nil},
		{"dlmopen", vgpu, "dlmopen", "does not go through libvgpu.so", 4096, nil},
		{"region counters rewritten", vgpu, "symbols", "its counters were rewritten", 2500, func(t *testing.T) {
			rewriteRegion(t, cache, regionUsedTotal, make([]byte, 8))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.rewrite != nil {
				c.rewrite(t)
			}
			before := len(events.got)
			bypass := n.hold(t, uidT, cidT, c.preload, c.api, c.mib) // granted: the library did not stop it
			rep, err := a.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			u := usageOf(rep, uidT)
			if u == nil || !u.Over || u.Offender == nil || u.Offender.PID != bypass.Process.Pid || len(rep.Killed) != 1 {
				t.Fatalf("after one pass: %+v, killed %+v", u, rep.Killed)
			}
			if !strings.Contains(u.Cause, c.cause) {
				t.Errorf("cause %q, want %q", u.Cause, c.cause)
			}
			done := make(chan error, 1)
			go func() { done <- bypass.Wait() }()
			select {
			case err := <-done:
				delete(n.procs, bypass)
				if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Errorf("the bypass ended with %v, want SIGKILL", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the bypass was not killed")
			}
			if !alive(honestProc) || !alive(neighbourProc) {
				t.Fatal("an honest process or the neighbour was killed")
			}
			if got := events.got[before:]; len(got) != 2 || !strings.HasPrefix(got[0], ReasonOverLimit+": process "+strconv.Itoa(bypass.Process.Pid)) ||
				!strings.HasPrefix(got[1], ReasonOverLimitKilled) {
				t.Errorf("events %q", got)
			}
			// The next pass finds the container within its limit again (the driver freed the
			// killed process's memory).
			rep, err = a.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if u := usageOf(rep, uidT); u == nil || u.Over || len(u.Processes) != 1 {
				t.Errorf("after the kill: %+v", u)
			}
			if nb := usageOf(rep, uidN); nb == nil || nb.Over || len(nb.Processes) != 1 {
				t.Errorf("neighbour: %+v", nb)
			}
		})
	}
}

// The region words a tenant rewrites (docs/usage-cache.md): used_total[0] and mem_limit[0].
var (
	regionUsedTotal = func() int64 {
		return regionOffset(func(s *region.LimitbedSpec) { s.UsedTotal = map[int]uint64{0: 0x0102030405060708} })
	}()
	regionMemLimit = func() int64 {
		return regionOffset(func(s *region.LimitbedSpec) { s.Limits = map[int]uint64{0: 0x0102030405060708} })
	}()
)

// regionOffset finds where a spec's marker value lands in the file, so no offset is repeated here.
func regionOffset(set func(*region.LimitbedSpec)) int64 {
	var s region.LimitbedSpec
	set(&s)
	b := s.Bytes()
	marker := binary.NativeEndian.AppendUint64(nil, 0x0102030405060708)
	return int64(strings.Index(string(b), string(marker)))
}

func rewriteRegion(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestAccountingRegionLimitRewrite: root in the container rewrites its region's limit to none. The
// library still enforces the process's own limit (docs/attacks.md), so nothing gets past it, and
// the node, judging by the driver's count, finds nobody over and kills nothing.
func TestAccountingRegionLimitRewrite(t *testing.T) {
	lister := fakeDriverLister(t)
	n := newBypassNode(t)
	n.container(uidT, cidT, 3000)
	vgpu := filepath.Join(n.p.Lib, "libvgpu.so")
	honest := n.hold(t, uidT, cidT, vgpu, "symbols", 1000)
	rewriteRegion(t, filepath.Join(n.dir, uidT+"_main", paths.UsageCacheName), regionMemLimit, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	c := exec.Command(filepath.Join(n.p.Bin, "cudaprobe"), "--mib", "4096")
	c.Env = append(os.Environ(), "LD_PRELOAD="+vgpu, "LD_LIBRARY_PATH="+n.p.Lib,
		"CUDA_DEVICE_MEMORY_LIMIT_0="+n.limitOf[uidT], "CUDA_DEVICE_MEMORY_SHARED_CACHE="+filepath.Join(n.dir, uidT+"_main", paths.UsageCacheName))
	out, _ := c.Output()
	if !strings.Contains(string(out), `"granted_mib":0`) || !strings.Contains(string(out), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("4096 MiB under a 3000 MiB limit after the region's limit was rewritten: %s", out)
	}
	events := &fakeEvents{}
	a := &Accounting{Driver: lister, Identity: n.ids, Dir: n.dir, ProcRoot: n.proc, ContextAllowance: 512 << 20,
		Enforcement: v1.EnforcementKill, Killer: PidfdKiller{ProcRoot: n.proc}, Events: events, Logger: klog.Background()}
	rep, err := a.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if u := usageOf(rep, uidT); u == nil || u.Over || len(rep.Killed) != 0 || len(events.got) != 0 {
		t.Fatalf("after the rewrite: %+v, killed %+v, events %q", u, rep.Killed, events.got)
	}
	if !alive(honest) {
		t.Fatal("the honest process was killed")
	}
}

// fakeDriverLister is the driver's process list through fakegpu's real NVML (profile a16-16q,
// env: fakegpu's variables), shut down with the test.
func fakeDriverLister(t *testing.T, env ...string) *gpu.ProcessLister {
	t.Helper()
	lib, _ := fakenvml.Setup(t, "a16-16q", env...)
	lister := &gpu.ProcessLister{Lib: lib}
	if err := lister.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lister.Shutdown)
	return lister
}
