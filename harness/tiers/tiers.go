// Package tiers probes which of the test tiers this machine can run: the container backends, the
// kind tier, a real GPU and the C build. `limitbed doctor` prints the probes and the testscript
// conditions use them, so both say the same thing and neither claims a tier is missing when it exists.
package tiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/harness/nodeimage"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/docker"
)

// Result is one probe: OK with a detail line, or the reason and the command that fixes it.
type Result struct {
	Tier   string
	OK     bool
	Detail string // what was found (OK) or what is missing (not OK)
	Fix    string // the command or step that makes the tier available; "" when OK
}

// Probe runs every probe, in the order doctor prints them.
func Probe(ctx context.Context, logger *slog.Logger, root string) []Result {
	return []Result{
		Docker(ctx, logger),
		Host(ctx, logger),
		Kind(ctx, logger, root),
		GPU(ctx),
		CBuild(root),
	}
}

func fail(tier string, err error, fix string) Result {
	return Result{Tier: tier, Detail: err.Error(), Fix: fix}
}

// Docker: the container tier and the matrix's backend.
func Docker(ctx context.Context, logger *slog.Logger) Result {
	if err := docker.New(logger).Available(ctx); err != nil {
		return fail("docker", err, dockerFix())
	}
	return Result{Tier: "docker", OK: true, Detail: "an engine answers (container scenarios, the matrix: every launch method)"}
}

// Host: the private-mount-namespace backend (no sshd or cron).
func Host(ctx context.Context, logger *slog.Logger) Result {
	if err := sandbox.NewHost(logger, "").Available(ctx); err != nil {
		return fail("host", err, "run as root (unshare -m needs CAP_SYS_ADMIN)")
	}
	return Result{Tier: "host", OK: true, Detail: "private mount namespaces (login-session tests; no ssh or cron methods)"}
}

// Kind: a kind cluster with a real kubelet (make e2e). It needs a Docker engine and a node image:
// present, or buildable offline here by scripts/node-image.sh.
func Kind(ctx context.Context, logger *slog.Logger, root string) Result {
	if r := Docker(ctx, logger); !r.OK {
		return Result{Tier: "kind", Detail: "needs a Docker engine: " + r.Detail, Fix: r.Fix}
	}
	img, err := nodeimage.OfflineRef(ctx, root)
	if err != nil {
		return fail("kind", err, "run from a limitbed checkout (LIMITBED_ROOT=...)")
	}
	if nodeimage.Present(ctx, img) {
		return Result{Tier: "kind", OK: true, Detail: "node image " + img + " present (make e2e)"}
	}
	if missing := missingTools("go", "gcc", "debootstrap", "containerd", "ctr", "jq"); len(missing) > 0 {
		return Result{Tier: "kind", Detail: "node image " + img + " is not built and " + strings.Join(missing, ", ") + " missing to build it",
			Fix: "sudo scripts/install-deps.sh, then make node-image"}
	}
	if os.Geteuid() != 0 {
		return Result{Tier: "kind", Detail: "node image " + img + " is not built; building it needs root (debootstrap, chroot)",
			Fix: "sudo make node-image"}
	}
	return Result{Tier: "kind", OK: true, Detail: "node image " + img + " not built yet: make e2e builds it first (make node-image alone)"}
}

// GPU: an NVIDIA driver answering nvidia-smi (the GPU tier: the bundle's ./gpu-check, docs/gpu-report.md).
func GPU(ctx context.Context) Result {
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		return fail("gpu", errors.New("no nvidia-smi: no NVIDIA driver on this machine"), "run the GPU tier on a GPU machine: make gpu-bundle, then ./gpu-check there (docs/gpu-report.md)")
	}
	out, err := exec.CommandContext(ctx, "nvidia-smi", "-L").CombinedOutput()
	if err != nil {
		return fail("gpu", fmt.Errorf("nvidia-smi -L: %w: %s", err, bytes.TrimSpace(out)), "check the NVIDIA driver (nvidia-smi)")
	}
	n := len(strings.Split(strings.TrimSpace(string(out)), "\n"))
	return Result{Tier: "gpu", OK: true, Detail: fmt.Sprintf("%d GPU(s): sudo scripts/gpu-check.sh (or the bundle's ./gpu-check)", n)}
}

// CBuild: the C libraries and tools under build/.
func CBuild(root string) Result {
	var missing []string
	for _, f := range []string{"lib/libvgpu.so", "lib/libcuda.so.1", "lib/libnvidia-ml.so.1", "bin/cudaprobe", "bin/gpuinfo"} {
		if _, err := os.Stat(filepath.Join(root, "build", f)); err != nil {
			missing = append(missing, "build/"+f)
		}
	}
	if len(missing) > 0 {
		return Result{Tier: "c-build", Detail: "missing " + strings.Join(missing, ", "), Fix: "make c"}
	}
	return Result{Tier: "c-build", OK: true, Detail: "build/lib and build/bin present"}
}

func missingTools(tools ...string) []string {
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	return missing
}

func dockerFix() string {
	if os.Geteuid() == 0 {
		return "scripts/docker-up.sh (installs Debian's docker.io and starts dockerd)"
	}
	return "sudo scripts/docker-up.sh (installs Debian's docker.io and starts dockerd)"
}
