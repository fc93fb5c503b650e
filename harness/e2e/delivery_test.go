//go:build kind

package e2e

import (
	"strings"
	"testing"
)

// The design's reproduction, fixed: a pod with nvidia.com/gpumem: 3000 on a fake A16-16Q (16 GiB)
// asks for 4096 MiB. In file mode (the default) every way into the container is refused — kubectl
// exec, bash -c, an ssh login, su -, sudo and cron — and the limits file is on the node.
func TestKindFileModeEveryLaunchMethodIsCapped(t *testing.T) {
	e := need(t)
	pc := gpuPod(t, e, fileWorker, 3000, nil)
	node := e.c.Worker(fileWorker)

	limits := nodeLimitsFile(t, e, node, pc)
	if !strings.Contains(limits, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n") || !strings.Contains(limits, "HAMI_LIMITS_FORMAT=1\n") {
		t.Errorf("limits file on %s = %q, want CUDA_DEVICE_MEMORY_LIMIT_0=3000m and HAMI_LIMITS_FORMAT=1", node, limits)
	}
	if got, err := pc.ReadFile(t.Context(), "/overrideEnv"); err != nil || string(got) != limits {
		t.Errorf("/overrideEnv in the pod = %q (%v), want the node's limits file", got, err)
	}

	for _, method := range []string{"exec", "ssh", "bash -c", "su -", "sudo", "cron"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			r := probe(t, pc, method, 4096)
			if method == "ssh" || method == "su -" || method == "sudo" || method == "cron" {
				if _, ok := r.Env["CUDA_DEVICE_MEMORY_LIMIT_0"]; ok {
					t.Errorf("%s: the session still has the variables; it does not exercise the file", method)
				}
			}
			wantRefused(t, method, r, 3000)
		})
	}
}

// Env mode, set for the second worker by its config.json entry: kubectl exec still has the
// variables and is refused, but an ssh login (a fresh environment) gets the whole 4096 MiB — the
// bug the file fixes, reproduced on purpose — and there is no limits file.
func TestKindEnvModeNodeOverride(t *testing.T) {
	e := need(t)
	pc := gpuPod(t, e, envWorker, 3000, nil)
	if limits := nodeLimitsFile(t, e, e.c.Worker(envWorker), pc); limits != "" {
		t.Errorf("env mode wrote a limits file: %q", limits)
	}
	if res, err := pc.Exec(t.Context(), []string{"test", "-e", "/overrideEnv"}, sandboxOpts()); err != nil || res.ExitCode == 0 {
		t.Errorf("env mode mounted /overrideEnv (err %v)", err)
	}
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		wantRefused(t, "exec", probe(t, pc, "exec", 4096), 3000)
	})
	t.Run("ssh", func(t *testing.T) {
		t.Parallel()
		wantGranted(t, "ssh", probe(t, pc, "ssh", 4096))
	})
}

// A pod's hami.io/limit-delivery annotation (allowed by the chart's admin gate in this cluster)
// beats the node's mode: env on the file-mode worker, file on the env-mode worker.
func TestKindPodAnnotation(t *testing.T) {
	e := need(t)
	t.Run("env on a file node", func(t *testing.T) {
		t.Parallel()
		pc := gpuPod(t, e, fileWorker, 3000, map[string]string{"hami.io/limit-delivery": "env"})
		wantGranted(t, "ssh", probe(t, pc, "ssh", 4096))
	})
	t.Run("file on an env node", func(t *testing.T) {
		t.Parallel()
		pc := gpuPod(t, e, envWorker, 3000, map[string]string{"hami.io/limit-delivery": "file"})
		wantRefused(t, "ssh", probe(t, pc, "ssh", 4096), 3000)
	})
}
