package memjudge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/limitbed/limitbed/fakegpu/profile"
	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Paths are the built artefacts the judge runs (internal/cbuild gives them to tests).
type Paths struct {
	Root string // repository root (hamicore/test/privatens)
	Lib  string // directory with libcuda.so.1 (fakegpu), libnvidia-ml.so.1, libvgpu.so
	Bin  string // directory with memload and fgtruth
}

// pod is one pod's worth of shared files: the fake host's device state, the limits file, the
// usage.cache directory, and the socket forked processes connect back to.
type pod struct {
	cfg      Config
	dir      string // pod directory (usage.cache, the socket), bound into login sessions
	profile  string
	limits   string
	cache    string
	sock     string
	stateDir string
	nsTmp    string // where privatens leaves its scratch directories (cleaned with the run)
	ln       *net.UnixListener
}

// fakeHost is the fake host: two GPUs of different speed, so that the default CUDA_DEVICE_ORDER
// (FASTEST_FIRST) already makes CUDA ordinal 0 the second GPU, as on a mixed node. id makes its
// UUIDs, which name its state file, the run's own.
func fakeHost(id string) *profile.Profile {
	p := profile.New()
	p.DriverVersion, p.CUDAVersion, p.ContextMiB, p.LaunchNS = "550.90.07", 12040, ContextMiB, 10000
	for i, sms := range []uint32{10, 20} {
		d := profile.NewDevice()
		d.Name, d.UUID, d.MemoryMiB = "NVIDIA A16-16Q", fmt.Sprintf("GPU-3c5a7e21-8f4b-4d2a-9b61-%s%d", id, i), 16384
		d.PCIBusID, d.PCIDeviceID = fmt.Sprintf("00000000:00:%02X.0", 5+i), 0x25B610DE
		d.Architecture, d.CCMajor, d.CCMinor, d.SMCount = "ampere", 8, 6, sms
		p.Devices = append(p.Devices, d)
	}
	return p
}

func newPod(cfg Config, dir string) (*pod, error) {
	p := &pod{cfg: cfg, dir: filepath.Join(dir, "pod")}
	if err := os.MkdirAll(p.dir, 0o777); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	// A fresh fake host per run: its UUIDs name its state file, which login sessions find at
	// fakegpu's default directory.
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, fmt.Errorf("random host id: %w", err)
	}
	id := hex.EncodeToString(r[:])[:11]
	p.profile = filepath.Join(dir, "profile")
	var prof bytes.Buffer
	if err := profile.Write(&prof, fakeHost(id)); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	if err := os.WriteFile(p.profile, prof.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	p.cache = filepath.Join(p.dir, paths.UsageCacheName)
	p.limits = filepath.Join(dir, "limits")
	vars := map[string]string{libvars.SharedCache: p.cache, libvars.SMLimit: "100", libvars.LogLevel: "1"}
	for i, l := range cfg.Limits {
		vars[libvars.MemoryLimitOf(i)] = fmt.Sprintf("%dm", l>>20)
	}
	lim, err := limitsfile.Render(vars)
	if err != nil {
		return nil, fmt.Errorf("limits file: %w", err)
	}
	if err := os.WriteFile(p.limits, lim, 0o644); err != nil {
		return nil, fmt.Errorf("limits file: %w", err)
	}
	// A login session has no FAKEGPU_* variables: fakegpu uses its default directory there,
	// /run/fakegpu, which the pod's namespaces see as this one (nsArgs): the host's own is
	// never touched, and pods running at once never share a fake host.
	p.stateDir = filepath.Join(dir, "gpu")
	if err := os.MkdirAll(p.stateDir, 0o1777); err != nil {
		return nil, fmt.Errorf("fake host state directory: %w", err)
	}
	p.nsTmp = filepath.Join(dir, "ns")
	if err := os.MkdirAll(p.nsTmp, 0o700); err != nil {
		return nil, fmt.Errorf("namespace scratch directory: %w", err)
	}
	p.sock = filepath.Join(p.dir, "judge.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for forked processes: %w", err)
	}
	p.ln = ln
	return p, nil
}

func (p *pod) close() { _ = p.ln.Close() }

// hostEnv: the variables that select the fake host (for fgtruth and exec'd processes).
func (p *pod) hostEnv() []string {
	return []string{
		"LD_LIBRARY_PATH=" + p.cfg.Paths.Lib,
		"FAKEGPU_PROFILE=" + p.profile,
		"FAKEGPU_STATE_DIR=" + p.stateDir,
	}
}

// procSpec says how a process of the pod starts.
type procSpec struct {
	how   string // exec or login
	cvd   string // CUDA_VISIBLE_DEVICES, "" for none
	order string // CUDA_DEVICE_ORDER, "" for the default
}

func (s procSpec) String() string {
	v := s.how
	if s.cvd != "" {
		v += " cvd=" + s.cvd
	}
	if s.order != "" {
		v += " order=" + s.order
	}
	return v
}

// start runs memload the way the container runtime (exec) or a login session starts it.
func (p *pod) start(ctx context.Context, idx int, s procSpec) (*proc, error) {
	bin := filepath.Join(p.cfg.Paths.Bin, "memload")
	lib := filepath.Join(p.cfg.Paths.Lib, "libvgpu.so")
	user := []string{}
	if s.cvd != "" {
		user = append(user, "CUDA_VISIBLE_DEVICES="+s.cvd)
	}
	if s.order != "" {
		user = append(user, "CUDA_DEVICE_ORDER="+s.order)
	}
	var cmd *exec.Cmd
	switch {
	case s.how == "login":
		// No environment at all (env -i): the library comes from /etc/ld.so.preload and the
		// limits from /overrideEnv; what a user sets in the session shell is all it has.
		args := append(p.nsArgs(lib), "--", "env", "-i")
		args = append(append(args, user...), bin)
		cmd = exec.CommandContext(ctx, filepath.Join(p.cfg.Paths.Root, "hamicore", "test", "privatens"), args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + p.nsTmp}
	case p.cfg.Login:
		// The container's own processes: /overrideEnv is there (file mode) and so is the
		// environment the device plugin gave them.
		args := append(p.nsArgs(lib), "--", "env")
		args = append(append(append(args, p.execEnv(lib)...), user...), bin)
		cmd = exec.CommandContext(ctx, filepath.Join(p.cfg.Paths.Root, "hamicore", "test", "privatens"), args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + p.nsTmp}
	default:
		cmd = exec.CommandContext(ctx, bin)
		cmd.Env = append(p.execEnv(lib), user...)
	}
	return p.run(ctx, idx, s.how, cmd)
}

// nsArgs: the container's files. --no-unmount: a login session the judge kills may have
// started processes that live on in its namespace, as in a container.
func (p *pod) nsArgs(lib string) []string {
	return []string{"--preload", lib, "--override-env", p.limits, "--file", "/etc/fakegpu/profile=" + p.profile,
		"--bind", p.cfg.Paths.Lib, "--bind", p.cfg.Paths.Bin, "--bind", p.dir, "--bind", p.stateDir,
		"--bind", "/run/fakegpu=" + p.stateDir, "--no-unmount"}
}

func (p *pod) execEnv(lib string) []string {
	level := "1"
	if v := os.Getenv("MEMJUDGE_LIBCUDA_LOG_LEVEL"); v != "" { // to debug a replay
		level = v
	}
	env := append([]string{"LD_PRELOAD=" + lib, libvars.SharedCache + "=" + p.cache, libvars.LogLevel + "=" + level},
		p.hostEnv()...)
	for i, l := range p.cfg.Limits {
		env = append(env, fmt.Sprintf("%s=%dm", libvars.MemoryLimitOf(i), l>>20))
	}
	return env
}

func (p *pod) run(ctx context.Context, idx int, how string, cmd *exec.Cmd) (*proc, error) {
	log, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("p%d.log", idx)))
	if err != nil {
		return nil, fmt.Errorf("process log: %w", err)
	}
	cmd.Stderr = log
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s memload: %w", how, err)
	}
	pr := &proc{idx: idx, how: how, w: in, lines: startReader(out), cmd: cmd, alive: true, cur: -1,
		units: map[int]int{}, objs: map[int]*object{}, log: log}
	if pr.pid, err = hello(ctx, pr.lines); err != nil {
		pr.stop()
		return nil, fmt.Errorf("%s memload: %w (log %s)", how, err, log.Name())
	}
	return pr, nil
}

// accept takes the connection of a process another one forked or spawned.
func (p *pod) accept(ctx context.Context, idx int, how string, pid int) (*proc, error) {
	_ = p.ln.SetDeadline(time.Now().Add(replyTimeout))
	c, err := p.ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("%s child %d did not connect: %w", how, pid, err)
	}
	pr := &proc{idx: idx, how: how, w: c, conn: c, lines: startReader(c), alive: true, cur: -1, units: map[int]int{},
		objs: map[int]*object{}}
	got, err := hello(ctx, pr.lines)
	if err != nil || got != pid {
		pr.stop()
		return nil, fmt.Errorf("%s child: greeted as %d (%v), want %d", how, got, err, pid)
	}
	pr.pid = got
	return pr, nil
}
