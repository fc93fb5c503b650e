// Package script is the scenario engine: testscript (github.com/rogpeppe/go-internal/testscript)
// over testdata/script/*.txtar with commands that drive a simulated GPU node (harness/matrix/node):
// start the device plugin, allocate pods through the kubelet API with the HAMi scheduler's
// annotations, start their containers on a sandbox backend, start processes through every launch
// method and check what each was granted. docs/scenarios.md is the command reference.
package script

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/docker"
	"github.com/limitbed/limitbed/harness/tiers"
	"github.com/limitbed/limitbed/internal/tier"
)

type stateKey struct{}

// state is one script's world: its node, pods, containers and the last probe.
type state struct {
	dir       string // short per-script directory for the node (unix sockets)
	artifacts node.Artifacts
	root      string // repository root
	logger    *slog.Logger

	node      *node.Node
	pods      map[string]*node.Pod
	ctrs      map[string]sandbox.Container
	lastProbe *probeResult
	holders   map[string]*holder  // by holder name
	killable  map[string]killable // each holder's pod and PID, kept after it ended (reusepid)
	takers    map[string]*taker   // processes started by reusepid, by name
	monitor   *node.Monitor       // the vgpu-monitor binary (monitor start)
	// monitorPeriod is its accounting period.
	monitorPeriod time.Duration

	backendOnce sync.Once
	backend     sandbox.Backend
	backendErr  error
}

// Config is what the test passes in.
type Config struct {
	Dir       string // testdata/script
	Root      string // repository root
	Artifacts node.Artifacts
	Logger    *slog.Logger
	Update    bool // rewrite cmp golden files in the archives
}

// Params returns the testscript parameters for the scenarios.
func Params(cfg Config) testscript.Params {
	return testscript.Params{
		Dir:                 cfg.Dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		UpdateScripts:       cfg.Update,
		Deadline:            time.Now().Add(20 * time.Minute),
		Setup: func(env *testscript.Env) error {
			dir, err := os.MkdirTemp("", "lbs")
			if err != nil {
				return fmt.Errorf("script node dir: %w", err)
			}
			st := &state{dir: dir, artifacts: cfg.Artifacts, root: cfg.Root, logger: cfg.Logger,
				pods: map[string]*node.Pod{}, ctrs: map[string]sandbox.Container{}, holders: map[string]*holder{},
				killable: map[string]killable{}, takers: map[string]*taker{}}
			env.Values[stateKey{}] = st
			env.Setenv("TOOLS", node.ToolDir)
			env.Defer(st.close)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"plugin":     cmdPlugin,
			"pod":        cmdPod,
			"container":  cmdContainer,
			"launch":     cmdLaunch,
			"probe":      cmdProbe,
			"granted":    cmdGranted,
			"refused":    cmdRefused,
			"hold":       cmdHold,
			"release":    cmdRelease,
			"held":       cmdHeld,
			"reusepid":   cmdReusePID,
			"alive":      cmdAlive,
			"region":     cmdRegion,
			"hostfile":   cmdHostfile,
			"limitsfile": cmdLimitsfile,
			"monitor":    cmdMonitor,
		},
		Condition: condition,
	}
}

func getState(ts *testscript.TestScript) *state { return ts.Value(stateKey{}).(*state) }

func (st *state) close() {
	ctx := context.Background()
	for _, h := range st.holders {
		h.Stop(ctx)
	}
	for _, tk := range st.takers {
		tk.stop()
	}
	if st.monitor != nil {
		st.monitor.Stop()
	}
	for _, c := range st.ctrs {
		_ = c.Stop(ctx)
	}
	if st.node != nil {
		st.node.Close()
	}
	_ = os.RemoveAll(st.dir)
}

// condition implements [root], [docker], [kind], [gpu] and [backend:NAME].
func condition(cond string) (bool, error) {
	switch cond {
	case "root":
		return provided(cond, tier.Root, tier.Root.Probe() == nil)
	case "docker":
		return provided(cond, tier.Docker, dockerAvailable())
	case "backend":
		// Some sandbox backend can start containers: docker, or host when root. CI provides
		// Docker, so there the backend must be Docker.
		return provided(cond, tier.Docker, dockerAvailable() || (!tier.CI() && hostAvailable()))
	case "kind":
		// The kind tier can run here: a Docker engine and a node image, present or buildable.
		return provided(cond, tier.Kind, kindAvailable())
	case "gpu":
		return provided(cond, tier.GPU, tier.GPU.Probe() == nil) // CI has none: a skip there too
	case "backend:docker", "backend:host":
		b := os.Getenv(node.BackendEnv)
		if b == "" {
			b = "host"
			if dockerAvailable() {
				b = "docker"
			}
		}
		return "backend:"+b == cond, nil
	}
	return false, fmt.Errorf("unknown condition %q (known: root, docker, backend, kind, gpu, backend:docker, backend:host)", cond)
}

// provided is a condition on a tier: its answer, or under CI=true, for a tier CI provides, an
// error in place of the false that would make the script skip.
func provided(cond string, t tier.Tier, ok bool) (bool, error) {
	if !ok && tier.CI() && t.CIProvides() {
		return false, fmt.Errorf("[%s]: %s: failing instead of skipping (CI=true: CI provides this)", cond, tier.Message(t, "not here"))
	}
	return ok, nil
}

var (
	dockerOnce sync.Once
	dockerOK   bool
)

func dockerAvailable() bool {
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		dockerOK = docker.New(slog.New(slog.DiscardHandler)).Available(ctx) == nil
	})
	return dockerOK
}

func kindAvailable() bool {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tiers.Kind(ctx, slog.New(slog.DiscardHandler), root).OK
}

func hostAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return sandbox.NewHost(slog.New(slog.DiscardHandler), "").Available(ctx) == nil
}

// getBackend selects the backend once per script. Scripts guard container commands with
// [!backend] skip, which names what is missing; reaching here without a backend is a failure.
func (st *state) getBackend(ts *testscript.TestScript) sandbox.Backend {
	st.backendOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		st.backend, st.backendErr = node.SelectBackend(ctx, st.logger, "")
	})
	if st.backendErr != nil {
		ts.Fatalf("%v (guard the script with: [!backend] skip 'needs docker or root')", st.backendErr)
	}
	return st.backend
}
