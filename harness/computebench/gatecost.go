package computebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/libvars"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// GateCost measures what libvgpu.so adds to a kernel launch on fakegpu, in instructions
// (callgrind), counting only inside the probe's launch loop (the wrapper and the driver it calls:
// --toggle-collect), so the library's other threads do not count: natively, with the library and
// no scheduler, and with the library while the node's scheduler lets its container launch (a
// container of the scheduler's with no limit: its grant word says FREE, and the launch path is the
// one of a held slice: the grant word compared with the one it joined, a launch of the batch
// counted). The launches name no function, so the driver refuses each at once: the figure is the
// library's path, not fakegpu's queueing, and the same in every run. A held slice's markers (one
// per about 1 ms of GPU work, a few thousand instructions each: docs/benchmarks.md) are not in it.
// Needs valgrind and root (the container's mount namespace).
type GateCost struct {
	AllocProbe string // hamicore-allocprobe (BENCH_LAUNCH_ONLY=1: N launches of an empty kernel)
	Preload    string // libvgpu.so
	Lib        string // fakegpu's libraries
	ProfileDir string
	Privatens  string
	Dir        string // scratch
	N          int
	Logger     klog.Logger
}

// GateFigures are instructions per cuLaunchKernel.
type GateFigures struct {
	Native, Library, Held int64
}

// Run measures the three figures.
func (g *GateCost) Run(ctx context.Context) (GateFigures, error) {
	var f GateFigures
	if _, err := exec.LookPath("valgrind"); err != nil {
		return f, fmt.Errorf("bench gate: valgrind is needed (apt-get install valgrind): %w", err)
	}
	state := filepath.Join(g.Dir, "gpu")
	if err := os.MkdirAll(state, 0o777); err != nil {
		return f, err
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + g.Lib, "FAKEGPU_PROFILE=a16-16q",
		"FAKEGPU_PROFILE_DIR=" + g.ProfileDir, "FAKEGPU_STATE_DIR=" + state, "FAKEGPU_LAUNCH_NS=0", "BENCH_LAUNCH_ONLY=1"}
	lib := append(append([]string{}, base...), "LD_PRELOAD="+g.Preload, libvars.SharedCache+"="+filepath.Join(g.Dir, paths.UsageCacheName))
	var err error
	if f.Native, err = g.perLaunch(ctx, base, nil); err != nil {
		return f, err
	}
	if f.Library, err = g.perLaunch(ctx, lib, nil); err != nil {
		return f, err
	}
	// The device plugin's records of the container (g.Dir is the node's hook path), then the
	// scheduler. A limit of 100 %: its grant word says FREE.
	_, resp, err := RecordContainer(g.Dir, Container{Name: "bench", Limit: 100, Policy: "default", Priority: 1},
		"GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50") // a16-16q's GPU
	if err != nil {
		return f, err
	}
	mounts, err := SchedMounts(resp)
	if err != nil {
		return f, err
	}
	containers := paths.ContainersDir(g.Dir)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	n := &timeslice.Node{GrantDir: schedproto.GrantDir(g.Dir), ContainersDir: containers, Source: timeslice.LimitsFiles{Dir: containers},
		Config: timeslice.DefaultConfig(), Logger: g.Logger}
	go func() { done <- n.Run(sctx) }()
	defer func() { stop(); <-done }()
	time.Sleep(500 * time.Millisecond) // the scheduler has read the records
	held := append(append([]string{}, base...), "LD_PRELOAD="+g.Preload, libvars.SharedCache+"="+paths.ContainerUsageCache)
	wrap := append(append([]string{g.Privatens, "--bind", g.Dir}, mounts...), "--")
	f.Held, err = g.perLaunch(ctx, held, wrap)
	return f, err
}

// perLaunch is (instructions in cuLaunchKernel with N launches - with none) / N.
func (g *GateCost) perLaunch(ctx context.Context, env, wrap []string) (int64, error) {
	a, err := g.instructions(ctx, env, wrap, g.N)
	if err != nil {
		return 0, err
	}
	b, err := g.instructions(ctx, env, wrap, 0)
	if err != nil {
		return 0, err
	}
	return (a - b) / int64(g.N), nil
}

func (g *GateCost) instructions(ctx context.Context, env, wrap []string, n int) (int64, error) {
	out := filepath.Join(g.Dir, fmt.Sprintf("cg.%d.%d", time.Now().UnixNano(), n))
	args := append(append([]string{}, wrap...), "valgrind", "--tool=callgrind", "--toggle-collect=launches",
		"--callgrind-out-file="+out, g.AllocProbe, "--loop", strconv.Itoa(n))
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = env
	if o, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("bench gate: %v: %w\n%s", args, err, o)
	}
	fd, err := os.Open(out)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	return totals(fd)
}

// totals reads a callgrind output's summary (or totals) line.
func totals(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("callgrind output without a summary line")
}
