// Package drivertruth is `limitbed bench drivertruth`: the node's driver-truth accounting
// (plugin/monitor) against a real driver (or fakegpu), without a cluster. Two "containers" are
// real cgroups named as a runtime names its scopes, so the monitor maps each process to its
// container through /proc/<pid>/cgroup as on a node; their identities (GPU, limit) are given
// directly. The tenant runs an honest process under libvgpu.so and a bypassing one (glibc's own
// dlsym); the neighbour an honest one. It prints, per process, the driver's figure (NVML's
// usedGpuMemory), what the library accounted, and the monitor's attribution and verdict, and
// checks them; with Kill, that the bypass alone is SIGKILLed.
package drivertruth

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/monitor"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Options configure a run.
type Options struct {
	Cudaprobe string   // the tool (built against the real driver, or fakegpu's)
	Library   string   // libvgpu.so
	Env       []string // for the processes (fakegpu's variables; nothing on a real GPU)
	NVML      gpu.ProcessLister
	Allowance uint64 // context allowance per process
	Kill      bool
	Out       io.Writer
	Logger    klog.Logger
}

const mib = 1 << 20

// Figures of the run: what each process allocates and each container's limit.
const (
	tenantLimitMiB    = 3000
	neighbourLimitMiB = 2000
	honestMiB         = 1000
	bypassMiB         = 4096
)

type ctr struct {
	c      *identity.Container
	cgroup string
	cache  string
}

type proc struct {
	role   string
	cmd    *exec.Cmd
	ctr    *ctr
	waited bool
}

// Run runs the check. It fails (a *Mismatch) when the monitor's view is not the driver's.
func Run(ctx context.Context, o Options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("drivertruth: needs root (it makes two cgroups and moves its processes into them)")
	}
	if err := o.NVML.Init(); err != nil {
		return err
	}
	defer o.NVML.Shutdown()
	devs, err := o.NVML.Processes()
	if err != nil || len(devs) == 0 {
		return fmt.Errorf("drivertruth: no GPU: %v", err)
	}
	uuid := devs[0].UUID
	dir, err := os.MkdirTemp("", "limitbed-drivertruth-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tenant, err := newCtr(dir, "tenant", uuid, tenantLimitMiB)
	if err != nil {
		return err
	}
	defer os.Remove(tenant.cgroup)
	neighbour, err := newCtr(dir, "neighbour", uuid, neighbourLimitMiB)
	if err != nil {
		return err
	}
	defer os.Remove(neighbour.cgroup)
	var procs []*proc
	defer func() {
		for _, p := range procs {
			if !p.waited {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	start := func(role string, c *ctr, mib int, api string, preload string) error {
		p, err := o.start(role, c, mib, api, preload)
		if p != nil {
			procs = append(procs, p)
		}
		return err
	}
	if err := start("honest", tenant, honestMiB, "symbols", o.Library); err != nil {
		return err
	}
	if err := start("neighbour", neighbour, honestMiB, "symbols", o.Library); err != nil {
		return err
	}
	if err := start("bypass", tenant, bypassMiB, "dlvsym", o.Library); err != nil {
		return err
	}
	enf := v1.EnforcementReport
	if o.Kill {
		enf = v1.EnforcementKill
	}
	a := &monitor.Accounting{Driver: &o.NVML, Identity: staticSource{tenant.c, neighbour.c}, Dir: dir, ContextAllowance: o.Allowance,
		Enforcement: enf, Logger: o.Logger}
	rep, err := a.Pass(ctx)
	if err != nil {
		return err
	}
	m := &checker{out: o.Out}
	o.report(m, rep, procs, tenant, neighbour)
	if o.Kill {
		o.checkKill(ctx, m, a, procs, tenant)
	}
	return m.result()
}

// newCtr makes a container's cgroup (a scope named with a runtime ID, as containerd's), cache
// directory and identity.
func newCtr(dir, name, uuid string, limitMiB uint64) (*ctr, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b[:])
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err != nil {
		base = filepath.Join(base, "pids") // cgroup v1: any hierarchy names the scope
	}
	cg := filepath.Join(base, "limitbed-"+id+".scope")
	if err := os.Mkdir(cg, 0o755); err != nil {
		return nil, fmt.Errorf("drivertruth: cgroup: %w", err)
	}
	key := identity.Key{PodUID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", b[0:4], b[4:10])), Container: "main"}
	cache := filepath.Join(dir, key.String())
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	c := &identity.Container{Key: key, Pod: identity.Pod{Namespace: "drivertruth", Name: name, UID: key.PodUID}, ID: id,
		GPUs: []identity.GPU{{UUID: uuid}}, GPUSource: identity.SourceKubelet, Ordered: true,
		Limits: identity.Limits{Source: identity.SourceFile, Memory: []uint64{limitMiB * mib}, SM: 100, Priority: 1}}
	return &ctr{c: c, cgroup: cg, cache: filepath.Join(cache, paths.UsageCacheName)}, nil
}

// start runs cudaprobe holding mib in container c and waits for its report.
func (o Options) start(role string, c *ctr, mib int, api, preload string) (*proc, error) {
	cmd := exec.Command(o.Cudaprobe, "--mib", strconv.Itoa(mib), "--api="+api, "--hold-until-signal")
	cmd.Env = append(append(os.Environ(), o.Env...), "LD_PRELOAD="+preload,
		fmt.Sprintf("%s=%dm", libvars.MemoryLimitOf(0), c.c.Limits.Memory[0]/(1<<20)), libvars.SharedCache+"="+c.cache)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{role: role, cmd: cmd, ctr: c}
	if err := os.WriteFile(filepath.Join(c.cgroup, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return p, fmt.Errorf("drivertruth: move %s into its cgroup: %w", role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, fmt.Sprintf(`"granted_mib":%d`, mib)) {
		return p, fmt.Errorf("drivertruth: %s: %q %v", role, strings.TrimSpace(line), err)
	}
	return p, nil
}

// staticSource is the two containers' identity.
type staticSource []*identity.Container

func (s staticSource) Snapshot(context.Context) (*identity.Snapshot, error) {
	return identity.NewSnapshot(time.Now(), s), nil
}

// report prints and checks the first pass.
func (o Options) report(m *checker, rep *monitor.Report, procs []*proc, tenant, neighbour *ctr) {
	by := map[int]monitor.ProcessUsage{}
	usage := map[identity.Key]monitor.ContainerUsage{}
	for _, u := range rep.Usage {
		usage[u.Container.Key] = u
		for _, p := range u.Processes {
			by[p.PID] = p
		}
	}
	fmt.Fprintf(m.out, "%-10s %8s %12s %12s %-10s %s\n", "process", "pid", "driver MiB", "library MiB", "container", "in its region")
	for _, p := range procs {
		pu, ok := by[p.cmd.Process.Pid]
		lib := libraryMiB(p.ctr.cache, p.cmd.Process.Pid)
		fmt.Fprintf(m.out, "%-10s %8d %12d %12s %-10s %s\n", p.role, p.cmd.Process.Pid, pu.UsedBytes/mib, lib, p.ctr.c.Pod.Name, pu.InRegion)
		m.check("attributed: "+p.role, ok && pu.Key == p.ctr.c.Key, fmt.Sprintf("in %s", p.ctr.c.Pod.Name), fmt.Sprintf("%v %s", ok, pu.Key))
		want := uint64(honestMiB)
		if p.role == "bypass" {
			want = bypassMiB
		}
		m.check("driver holds what it allocated: "+p.role, pu.UsedBytes >= want*mib && pu.UsedBytes <= want*mib+o.Allowance,
			fmt.Sprintf("%d..%d MiB", want, want+o.Allowance/mib), fmt.Sprintf("%d MiB", pu.UsedBytes/mib))
		wantIn := "yes"
		if p.role == "bypass" {
			wantIn = "no"
		}
		m.check("its library sees it: "+p.role, pu.InRegion == wantIn, wantIn, pu.InRegion)
	}
	t, n := usage[tenant.c.Key], usage[neighbour.c.Key]
	fmt.Fprintf(m.out, "tenant: driver %d MiB, limit %d MiB + %d × %d MiB allowance = %d MiB, over %v; cause: %s\n",
		t.UsedBytes/mib, t.LimitBytes/mib, len(t.Processes), o.Allowance/mib, t.BoundBytes/mib, t.Over, t.Cause)
	fmt.Fprintf(m.out, "neighbour: driver %d MiB, bound %d MiB, over %v\n", n.UsedBytes/mib, n.BoundBytes/mib, n.Over)
	bypass := procs[len(procs)-1].cmd.Process.Pid
	m.check("tenant over its limit", t.Over, "over", fmt.Sprint(t.Over))
	m.check("offender is the bypass", t.Offender != nil && t.Offender.PID == bypass, strconv.Itoa(bypass), fmt.Sprint(t.Offender))
	m.check("neighbour within its limit", n.Judged && !n.Over, "within", fmt.Sprintf("judged %v over %v", n.Judged, n.Over))
}

// checkKill: the bypass ended by SIGKILL, the others run, and the next pass finds the tenant within.
func (o Options) checkKill(ctx context.Context, m *checker, a *monitor.Accounting, procs []*proc, tenant *ctr) {
	bypass := procs[len(procs)-1]
	done := make(chan error, 1)
	go func() { done <- bypass.cmd.Wait() }()
	var status string
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.Sys().(syscall.WaitStatus).Signal().String()
		}
		bypass.waited = true
	case <-time.After(10 * time.Second):
		status = "still running"
	}
	m.check("kill: the bypass ended by SIGKILL", status == syscall.SIGKILL.String(), "killed", status)
	for _, p := range procs[:len(procs)-1] {
		m.check("kill: "+p.role+" still runs", p.cmd.Process.Signal(syscall.Signal(0)) == nil, "running", "")
	}
	rep, err := a.Pass(ctx)
	if err != nil {
		m.check("kill: next pass", false, "a pass", err.Error())
		return
	}
	for _, u := range rep.Usage {
		if u.Container.Key == tenant.c.Key {
			m.check("kill: tenant within its limit again", !u.Over && len(u.Processes) == 1, "within, 1 process", fmt.Sprintf("over %v, %d processes", u.Over, len(u.Processes)))
		}
	}
}

// libraryMiB is what the container's usage region accounts to pid ("-" when it does not list it).
func libraryMiB(cache string, pid int) string {
	u, err := monitor.RegionFiles{}.ReadUsage(cache)
	if err != nil {
		return "?"
	}
	for _, s := range u.Live() {
		if int(s.PID) == pid || int(s.HostPID) == pid {
			return strconv.FormatUint(s.Used[0]/mib, 10)
		}
	}
	return "-"
}

// checker prints one PASS/FAIL line per check, as scripts/gpu-check.sh does.
type checker struct {
	out  io.Writer
	fail []string
}

func (c *checker) check(name string, ok bool, want, got string) {
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
		c.fail = append(c.fail, name)
	}
	fmt.Fprintf(c.out, "%-4s %-46s want %-22s %s\n", verdict, name, want, got)
}

// Mismatch is a run whose checks failed.
type Mismatch struct{ Failed []string }

func (e *Mismatch) Error() string { return "drivertruth: failed: " + strings.Join(e.Failed, "; ") }

func (c *checker) result() error {
	if len(c.fail) > 0 {
		return &Mismatch{c.fail}
	}
	return nil
}
