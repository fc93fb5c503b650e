//go:build kind

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/internal/tier"
)

// clusterName is the kind cluster's name: LIMITBED_E2E_CLUSTER, default limitbed-e2e. A leftover
// cluster of that name is deleted first, so concurrent runs on one machine need distinct names.
var clusterName = cmp.Or(os.Getenv("LIMITBED_E2E_CLUSTER"), "limitbed-e2e")

// env is the cluster every test uses; nil when LIMITBED_E2E is unset (the tests then skip, and
// fail under CI=true: tier.Kind).
var env *testEnv

type testEnv struct {
	c       *kindcluster.Cluster
	root    string
	release kindcluster.Release
	gpuUUID string
	logger  *slog.Logger
}

// pluginImage is the device plugin image make e2e built for this run (LIMITBED_E2E_PLUGIN_IMAGE:
// scripts/e2e.sh tags it with the cluster's name, so that another tree's run on the machine cannot
// replace it under this one).
var pluginImage = cmp.Or(os.Getenv("LIMITBED_E2E_PLUGIN_IMAGE"), "limitbed/device-plugin:dev")

// The set-up's deadlines, one per phase and only for what the phase does: no image is built here
// (make e2e builds them first, scripts/e2e.sh). The scenarios are bounded by go test's -timeout.
const (
	imagesDeadline  = 2 * time.Minute  // the images are in the Docker store
	createDeadline  = 10 * time.Minute // kind: nodes started, control plane Ready
	loadDeadline    = 10 * time.Minute // docker save once, ctr import into every node
	chartDeadline   = 5 * time.Minute  // helm install, the DaemonSets Ready
	pluginsDeadline = 5 * time.Minute  // every worker advertises nvidia.com/gpu
)

const (
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
		fmt.Fprintln(os.Stderr, "e2e: LIMITBED_E2E is not set; the kind tests skip, or fail under CI=true (run them with make e2e)")
		return m.Run()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e, cleanup, err := setup(logger)
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

// phase runs one set-up step under its own deadline and logs its duration.
func phase(logger *slog.Logger, name string, deadline time.Duration, f func(ctx context.Context) error) error {
	start := time.Now()
	logger.Info("phase start", "phase", name, "deadline", deadline)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := f(ctx); err != nil {
		return fmt.Errorf("%s (deadline %s): %w", name, deadline, err)
	}
	logger.Info("phase done", "phase", name, "seconds", int(time.Since(start).Seconds()))
	return nil
}

// requireImages checks that the images make e2e built are in the Docker store, and names the node
// image. It builds nothing.
func requireImages(ctx context.Context, logger *slog.Logger, root string) (kindcluster.NodeImage, error) {
	image, err := kindcluster.ResolveNodeImage(ctx, logger, root)
	if err != nil {
		return image, err
	}
	for _, ref := range []string{pluginImage, sandbox.WorkloadImage} {
		if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", ref).CombinedOutput(); err != nil {
			return image, fmt.Errorf("image %s is not in the Docker store (%v: %s): make e2e builds the images before "+
				"its tests start (scripts/e2e.sh; E2E_RUN=<test> for one scenario)", ref, err, bytes.TrimSpace(out))
		}
	}
	return image, nil
}

func setup(logger *slog.Logger) (*testEnv, func(), error) {
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

	var image kindcluster.NodeImage
	if err := phase(logger, "images present", imagesDeadline, func(ctx context.Context) (err error) {
		image, err = requireImages(ctx, logger, root)
		return err
	}); err != nil {
		return nil, noop, err
	}
	stateRoot, err := os.MkdirTemp("", "limitbed-e2e-fakegpu-")
	if err != nil {
		return nil, noop, err
	}
	var workers []kindcluster.Worker
	for i, mode := range []string{"file", "env-node-override", "mig"} {
		dir := filepath.Join(stateRoot, fmt.Sprintf("worker%d", i))
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, noop, err
		}
		// Writable by every user of the node, whatever the umask: a GPU process of a login
		// session (ssh, su -) runs as the pod's user without FAKEGPU_STATE_DIR, and fakegpu
		// takes its default /run/fakegpu (this directory) only when it may write there; else it
		// makes a fake GPU of its own in /tmp, beside the pods' (its state file is 0666 for them).
		if err := os.Chmod(dir, 0o1777); err != nil {
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
	if err := phase(logger, "create cluster", createDeadline, func(ctx context.Context) (err error) {
		e.c, err = kindcluster.Create(ctx, logger, kindcluster.Options{Name: clusterName, Image: image, Workers: workers, Dir: dir})
		return err
	}); err != nil {
		return e, cleanup, err
	}
	if err := phase(logger, "load images", loadDeadline, func(ctx context.Context) error {
		return e.c.LoadImages(ctx, pluginImage, sandbox.WorkloadImage)
	}); err != nil {
		return e, cleanup, err
	}
	e.release = kindcluster.Release{Name: "limitbed", Namespace: "limitbed-system", Chart: filepath.Join(root, "deployments", "helm", "limitbed")}
	if err := phase(logger, "helm install", chartDeadline, func(ctx context.Context) error {
		return e.c.HelmInstall(ctx, e.release, chartValues("file", true), 3*time.Minute)
	}); err != nil {
		return e, cleanup, err
	}
	if err := phase(logger, "device plugins registered", pluginsDeadline, func(ctx context.Context) error {
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
	repo, tag := pluginImage, "latest"
	if i := strings.LastIndex(pluginImage, ":"); i > strings.LastIndex(pluginImage, "/") {
		repo, tag = pluginImage[:i], pluginImage[i+1:]
	}
	migNode := clusterName + "-worker3"
	nodeConfig := []any{map[string]any{"name": migNode, "operatingmode": "mig"}}
	if envOverride {
		nodeConfig = append(nodeConfig, map[string]any{"name": clusterName + "-worker2", "limitdelivery": "env"})
	}
	return map[string]any{
		"image":        map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"nodeSelector": map[string]any{gpuNodeLabel: "true"},
		"devicePlugin": map[string]any{
			"limitDelivery": global, "allowPodLimitDeliveryOverride": true, "privileged": false, "verbosity": 4,
		},
		// The driver-truth accounting as the Docker tier runs it: 512 MiB a process beyond the limit
		// (fakegpu's context is 300 MiB); no privilege for the fake driver's NVML.
		"monitor": map[string]any{"gracePeriod": "5s", "sweepInterval": "2s", "contextAllowance": "512m", "privileged": false},
		// Namespaces labelled placementPolicyLabel=off stand for a cluster without the admission policy (trust_test.go).
		"admissionPolicy": map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": placementPolicyLabel, "operator": "NotIn", "values": []any{"off"}}}}},
		"nodeConfig": nodeConfig,
		// The monitor's fakegpu list keeps an ended process 4 s, as a real driver's record outlives
		// its process (TestKindKillPath's PID reuse needs a record that does).
		"fakeDriver": map[string]any{"enabled": true, "profile": fakeProfile, "nvmlStaleMs": 4000,
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
		tier.Unavailable(t, tier.Kind, "LIMITBED_E2E is not set")
	}
	return env
}
