//go:build kind

package e2e

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/sandbox"
)

// clusterName is the kind cluster's name: LIMITBED_E2E_CLUSTER, default limitbed-e2e. A leftover
// cluster of that name is deleted first, so concurrent runs on one machine need distinct names.
var clusterName = cmp.Or(os.Getenv("LIMITBED_E2E_CLUSTER"), "limitbed-e2e")

// env is the cluster every test uses; nil when LIMITBED_E2E is unset (the tests then skip).
var env *testEnv

type testEnv struct {
	c       *kindcluster.Cluster
	root    string
	release kindcluster.Release
	gpuUUID string
	logger  *slog.Logger
}

const (
	pluginImage  = "limitbed/device-plugin:dev"
	fakeProfile  = "a16-16q"
	migProfile   = "a100-mig" // the MIG worker's fake GPU: an A100 with three MIG instances
	fileWorker   = 0          // worker index: global file mode
	envWorker    = 1          // worker index: node override limitdelivery=env
	migWorker    = 2          // worker index: fake profile a100-mig, node override operatingmode=mig
	gpuNodeLabel = "limitbed.io/gpu"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("LIMITBED_E2E") == "" {
		fmt.Fprintln(os.Stderr, "e2e: LIMITBED_E2E is not set; the kind tests skip (run them with make e2e)")
		return m.Run()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e, cleanup, err := setup(ctx, logger)
	if err != nil {
		logger.Error("e2e setup failed", "err", err)
		exportLogs(logger, e)
		cleanup()
		return 1
	}
	env = e
	start := time.Now()
	code := m.Run()
	logger.Info("phase done", "phase", "scenarios", "seconds", int(time.Since(start).Seconds()))
	if code != 0 {
		exportLogs(logger, e)
	}
	cleanup()
	return code
}

// phase runs one setup step and logs its duration.
func phase(logger *slog.Logger, name string, f func() error) error {
	start := time.Now()
	logger.Info("phase start", "phase", name)
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	logger.Info("phase done", "phase", name, "seconds", int(time.Since(start).Seconds()))
	return nil
}

func setup(ctx context.Context, logger *slog.Logger) (*testEnv, func(), error) {
	e := &testEnv{logger: logger}
	noop := func() {}
	root, err := sandbox.RepoRoot()
	if err != nil {
		return nil, noop, err
	}
	e.root = root
	if e.gpuUUID, err = profileUUID(filepath.Join(root, "fakegpu", "profiles", fakeProfile+".profile")); err != nil {
		return nil, noop, err
	}

	// The plugin and workload images build while the node image is resolved and the cluster created.
	var imgErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		imgErr = phase(logger, "plugin and workload images", func() error {
			cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "plugin-image.sh"))
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("scripts/plugin-image.sh: %w\n%s", err, out)
			}
			return sandbox.EnsureWorkloadImage(ctx)
		})
	}()

	var image kindcluster.NodeImage
	if err := phase(logger, "node image", func() (err error) {
		image, err = kindcluster.ResolveNodeImage(ctx, logger, root)
		return err
	}); err != nil {
		wg.Wait()
		return nil, noop, err
	}
	stateRoot, err := os.MkdirTemp("", "limitbed-e2e-fakegpu-")
	if err != nil {
		wg.Wait()
		return nil, noop, err
	}
	var workers []kindcluster.Worker
	for i, mode := range []string{"file", "env-node-override", "mig"} {
		dir := filepath.Join(stateRoot, fmt.Sprintf("worker%d", i))
		if err := os.MkdirAll(dir, 0o777); err != nil {
			wg.Wait()
			return nil, noop, err
		}
		workers = append(workers, kindcluster.Worker{
			Labels: map[string]string{gpuNodeLabel: "true", "limitbed.io/delivery": mode},
			// The fake GPU's shared state of each node, visible from here for debugging.
			Mounts: []kindcluster.Mount{{HostPath: dir, ContainerPath: "/var/lib/fakegpu"}},
		})
	}
	dir, err := os.MkdirTemp("", "limitbed-e2e-")
	if err != nil {
		wg.Wait()
		return nil, noop, err
	}
	cleanup := func() {
		if e.c != nil && os.Getenv("LIMITBED_E2E_KEEP") == "" {
			start := time.Now()
			if err := e.c.Delete(); err != nil {
				logger.Error("delete cluster", "err", err)
			}
			logger.Info("phase done", "phase", "delete cluster", "seconds", int(time.Since(start).Seconds()))
		} else if e.c != nil {
			logger.Info("keeping the cluster (LIMITBED_E2E_KEEP)", "kubeconfig", e.c.Kubeconfig)
		}
		os.RemoveAll(stateRoot)
		os.RemoveAll(dir)
	}
	err = phase(logger, "create cluster", func() (err error) {
		e.c, err = kindcluster.Create(ctx, logger, kindcluster.Options{Name: clusterName, Image: image, Workers: workers, Dir: dir})
		return err
	})
	wg.Wait()
	if err != nil {
		return e, cleanup, err
	}
	if imgErr != nil {
		return e, cleanup, imgErr
	}
	if err := phase(logger, "load images", func() error {
		return e.c.LoadImages(ctx, pluginImage, sandbox.WorkloadImage)
	}); err != nil {
		return e, cleanup, err
	}
	e.release = kindcluster.Release{Name: "limitbed", Namespace: "limitbed-system", Chart: filepath.Join(root, "deployments", "helm", "limitbed")}
	if err := phase(logger, "helm install", func() error {
		return e.c.HelmInstall(ctx, e.release, chartValues("file", true), 3*time.Minute)
	}); err != nil {
		return e, cleanup, err
	}
	if err := phase(logger, "device plugins registered", func() error {
		for i := range workers {
			if err := waitGPUs(ctx, e.c, e.c.Worker(i), 2*time.Minute); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return e, cleanup, err
	}
	return e, cleanup, nil
}

// chartValues are the test bed's values: the fake driver, global delivery mode, the env override
// on the second worker, the third worker's MIG GPU and mode, the pod annotation gate, and a fast
// monitor.
func chartValues(global string, envOverride bool) map[string]any {
	migNode := clusterName + "-worker3"
	nodeConfig := []any{map[string]any{"name": migNode, "operatingmode": "mig"}}
	if envOverride {
		nodeConfig = append(nodeConfig, map[string]any{"name": clusterName + "-worker2", "limitdelivery": "env"})
	}
	return map[string]any{
		"image":        map[string]any{"repository": "limitbed/device-plugin", "tag": "dev", "pullPolicy": "Never"},
		"nodeSelector": map[string]any{gpuNodeLabel: "true"},
		"devicePlugin": map[string]any{
			"limitDelivery": global, "allowPodLimitDeliveryOverride": true, "privileged": false, "verbosity": 4,
		},
		// The driver-truth accounting as the Docker tier runs it: 512 MiB a process beyond the limit
		// (fakegpu's context is 300 MiB); no privilege for the fake driver's NVML.
		"monitor":    map[string]any{"gracePeriod": "5s", "sweepInterval": "2s", "contextAllowance": "512m", "privileged": false},
		"nodeConfig": nodeConfig,
		"fakeDriver": map[string]any{"enabled": true, "profile": fakeProfile,
			"nodeProfiles": []any{map[string]any{"name": migNode, "profile": migProfile}}},
	}
}

func exportLogs(logger *slog.Logger, e *testEnv) {
	if e == nil || e.c == nil {
		return
	}
	dir := os.Getenv("LIMITBED_E2E_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(e.root, "build", "e2e-logs")
	}
	if err := e.c.ExportLogs(dir); err != nil {
		logger.Error("export cluster logs", "err", err)
		return
	}
	logger.Info("cluster logs exported", "dir", dir)
}

func need(t *testing.T) *testEnv {
	t.Helper()
	if env == nil {
		t.Skip("LIMITBED_E2E is not set (make e2e runs this tier)")
	}
	return env
}
