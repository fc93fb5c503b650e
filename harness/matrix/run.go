package matrix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/launch"
)

// Runner runs the matrix.
type Runner struct {
	Backend   sandbox.Backend
	Artifacts node.Artifacts
	// GPUProfile is the fakegpu profile (the seed's A16-16Q).
	GPUProfile string
	Expected   Expected
	// CoreOld replaces the hami-v2.10 core column with this libvgpu.so (a real old release).
	CoreOld string
	// CoreLink: node.LinkNoAsNeeded judges every core as if linked with -Wl,--no-as-needed (the
	// driver double preloaded after it); "" or node.LinkAsNeeded: as built.
	CoreLink string
	// RequireNvidiaSMI fails a cell whose workload image has no nvidia-smi (CI=true: CI installs
	// it); otherwise that check is skipped and the report says so.
	RequireNvidiaSMI bool
	// PluginOld replaces the in-process hami-v2.10 plugin profile with this plugin binary (a real old
	// release), run against the fake kubelet and a fake API server (node.ExternalPlugin).
	PluginOld *node.ExternalPlugin
	// Methods limits the launch methods; empty: all of launch.Methods().
	Methods []launch.Method
	// Combos limits the combinations; empty: all 8.
	Combos []Combo
	// Parallel is how many containers run at once (default: all).
	Parallel int
	// WorkDir holds the nodes' directories (short: it holds unix sockets); default os.TempDir().
	WorkDir  string
	Logger   *slog.Logger
	Progress io.Writer // one line per finished cell; nil: none
}

// Result is one cell's outcome.
type Result struct {
	Combo
	Method      string        `json:"method"`
	KeepsEnv    bool          `json:"keeps_env"`
	Expected    bool          `json:"expected_enforced"`
	Observed    Observation   `json:"observed"`
	Enforced    bool          `json:"enforced"`
	Match       bool          `json:"match"`
	Why         []string      `json:"why,omitempty"` // failed checks, or why the cell could not run
	Unsupported string        `json:"unsupported,omitempty"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// Report is the whole run.
type Report struct {
	Backend   string        `json:"backend"`
	CoreOld   string        `json:"core_old,omitempty"`
	CoreLink  string        `json:"core_link,omitempty"`  // no-as-needed: the driver double preloaded after every core
	PluginOld string        `json:"plugin_old,omitempty"` // the old plugin binary and its arguments
	Started   time.Time     `json:"started"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Methods   []string      `json:"methods"`
	Combos    []Combo       `json:"combos"`
	Results   []Result      `json:"results"`
	Mismatch  int           `json:"mismatches"`
	Skipped   int           `json:"skipped"`
}

// OK reports whether every cell that ran matched the design.
// OK: every cell ran and matched; a skipped cell proves nothing, so it fails the run too.
func (r Report) OK() bool { return r.Mismatch == 0 && r.Skipped == 0 }

// Run runs every combination in its own container, all launch methods inside each: cron started
// first and waited for concurrently (it fires at the next minute), the others one after the other
// (each escaping probe takes 4 GiB of the fake 16 GiB card).
func (r *Runner) Run(ctx context.Context) (Report, error) {
	if r.Backend == nil || r.Logger == nil {
		return Report{}, errors.New("matrix: Backend and Logger are required")
	}
	methods := r.Methods
	if len(methods) == 0 {
		methods = launch.Methods()
	}
	combos := r.Combos
	if len(combos) == 0 {
		combos = Combos()
	}
	par := r.Parallel
	if par <= 0 {
		par = len(combos)
	}
	if err := node.CheckLink(r.CoreLink); err != nil {
		return Report{}, fmt.Errorf("matrix: %w", err)
	}
	rep := Report{Backend: r.Backend.Name(), CoreOld: r.CoreOld, CoreLink: r.CoreLink, Started: time.Now(), Combos: combos}
	if r.PluginOld != nil {
		rep.PluginOld = r.PluginOld.String()
	}
	for _, m := range methods {
		rep.Methods = append(rep.Methods, m.Name)
	}
	total := len(methods) * len(combos)
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, par)
	)
	record := func(res Result) {
		mu.Lock()
		defer mu.Unlock()
		done++
		rep.Results = append(rep.Results, res)
		if r.Progress != nil {
			fmt.Fprintf(r.Progress, "[%3d/%d] %s\n", done, total, progressLine(res))
		}
	}
	for i, c := range combos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r.runCombo(ctx, i, c, methods, record)
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(rep.Started)
	sortResults(rep.Results, combos, rep.Methods)
	for _, res := range rep.Results {
		switch {
		case res.Unsupported != "":
			rep.Skipped++
		case !res.Match:
			rep.Mismatch++
		}
	}
	return rep, nil
}

// runCombo runs one container. A failure to set it up fails all its cells, saying why.
func (r *Runner) runCombo(ctx context.Context, idx int, c Combo, methods []launch.Method, record func(Result)) {
	log := r.Logger.With("combo", c.String())
	failAll := func(err error) {
		log.Error("combination failed", "err", err)
		for _, m := range methods {
			res := r.newResult(c, m)
			res.Why = []string{err.Error()}
			record(res)
		}
	}
	dir, err := os.MkdirTemp(r.WorkDir, "lbm")
	if err != nil {
		failAll(fmt.Errorf("node dir: %w", err))
		return
	}
	defer os.RemoveAll(dir)
	core := c.Core
	if core == "hami-v2.10" && r.CoreOld != "" {
		core = r.CoreOld
	}
	cfg := node.Config{
		Dir: dir, Artifacts: r.Artifacts, GPUProfile: r.GPUProfile,
		Plugin: allocate.Profile(c.Plugin), Delivery: v1.LimitDelivery(c.Delivery), Core: core, CoreLink: r.CoreLink,
		Logger: log,
	}
	if c.Plugin == "hami-v2.10" && r.PluginOld != nil {
		cfg.External = r.PluginOld
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		failAll(err)
		return
	}
	defer n.Close()
	pod, err := n.Allocate(ctx, node.PodSpec{Name: "matrix", GPUMem: LimitMiB})
	if err != nil {
		failAll(err)
		return
	}
	name := fmt.Sprintf("limitbed-matrix-%d-%d", os.Getpid(), idx)
	ctr, err := r.Backend.Start(ctx, n.ContainerSpec(pod, name))
	if err != nil {
		failAll(err)
		return
	}
	defer func() { _ = ctr.Stop(context.WithoutCancel(ctx)) }()
	if err := node.WaitReady(ctx, ctr, 60*time.Second); err != nil {
		failAll(err)
		return
	}
	cache, _ := pod.CacheFile()

	var wg sync.WaitGroup
	for _, m := range methods {
		if !slow(m) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			record(r.runCell(ctx, ctr, c, m, cache))
		}()
	}
	for _, m := range methods {
		if !slow(m) {
			record(r.runCell(ctx, ctr, c, m, cache))
		}
	}
	wg.Wait()
}

func (r *Runner) newResult(c Combo, m launch.Method) Result {
	res := Result{Combo: c, Method: m.Name, KeepsEnv: m.KeepsEnv}
	if e, ok := r.Expected.Lookup(c, m.Name); ok {
		res.Expected = e.Enforced
	}
	return res
}

func (r *Runner) runCell(ctx context.Context, ctr sandbox.Container, c Combo, m launch.Method, cache string) (res Result) {
	res = r.newResult(c, m)
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	if _, ok := r.Expected.Lookup(c, m.Name); !ok {
		res.Why = []string{"no expectation for this cell in expected.json"}
		return res
	}
	cctx, cancel := context.WithTimeout(ctx, 150*time.Second)
	defer cancel()
	out, err := launch.Run(cctx, ctr, m, jobCommand(cache))
	if errors.Is(err, sandbox.ErrUnsupported) {
		res.Unsupported = err.Error()
		res.Match = true
		return res
	}
	if err != nil {
		res.Why = []string{err.Error()}
		return res
	}
	obs, err := parseJob(out.Stdout)
	res.Observed = obs
	if err != nil {
		res.Why = []string{fmt.Sprintf("%v (stderr: %s)", err, out.Stderr)}
		return res
	}
	res.Enforced = obs.Enforced()
	res.Why = checks(obs, res.Expected, r.RequireNvidiaSMI)
	res.Match = len(res.Why) == 0
	return res
}

// checks returns the checks that disagree with the expectation. requireSMI: a cell whose image
// has no nvidia-smi fails instead of skipping that check.
func checks(o Observation, enforced, requireSMI bool) []string {
	var why []string
	if o.Refused != enforced {
		if enforced {
			why = append(why, fmt.Sprintf("refused? no: %d MiB granted under a %d MiB limit", o.GrantedMiB, LimitMiB))
		} else {
			why = append(why, fmt.Sprintf("refused? yes (%s), want the allocation granted", o.Error))
		}
	}
	if (o.TotalMiB == LimitMiB) != enforced {
		if enforced {
			why = append(why, fmt.Sprintf("total? gpuinfo shows %d MiB, want %d", o.TotalMiB, LimitMiB))
		} else {
			why = append(why, fmt.Sprintf("total? gpuinfo shows the limit (%d MiB), want the card's memory", o.TotalMiB))
		}
	}
	switch {
	case o.SMIMissing && requireSMI:
		why = append(why, "total? nvidia-smi is not in the workload image, and CI=true needs its check (scripts/nvidia-smi.sh)")
	case o.SMIMissing:
	case o.SMIErr != "":
		why = append(why, fmt.Sprintf("total? nvidia-smi printed %q, not a memory total", o.SMIErr))
	case (o.SMITotalMiB == LimitMiB) != enforced:
		if enforced {
			why = append(why, fmt.Sprintf("total? nvidia-smi shows %d MiB, want %d", o.SMITotalMiB, LimitMiB))
		} else {
			why = append(why, fmt.Sprintf("total? nvidia-smi shows the limit (%d MiB), want the card's memory", o.SMITotalMiB))
		}
	}
	if o.Joined != enforced {
		if enforced {
			why = append(why, fmt.Sprintf("joined? pid %d not in usage.cache (slots %v%s)", o.HolderPID, o.RegionPIDs, orErr(o.RegionErr)))
		} else {
			why = append(why, fmt.Sprintf("joined? pid %d is in the pod's usage.cache, want it outside", o.HolderPID))
		}
	}
	return why
}

func orErr(s string) string {
	if s == "" {
		return ""
	}
	return "; " + s
}

// slow reports the methods that wait for a clock (cron fires at the next minute): they run
// concurrently with the rest.
func slow(m launch.Method) bool { return m.Name == "cron" }
