// Package nodeimage chooses the image that kind runs as nodes (LIMITBED_NODE_IMAGE) and names the
// offline one that scripts/node-image.sh builds. It builds nothing: make e2e builds the images first
// (scripts/e2e.sh), so that no deadline of the kind tier's test covers a build that takes tens of
// minutes on a cold machine. It needs only the standard library and kind's defaults, so that
// scripts/e2e.sh can ask it (harness/cmd/e2e-node-image) in seconds, before the test's own compile.
package nodeimage

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"
)

// Env selects the node image: "offline" (the image scripts/node-image.sh builds), "stock" (kind's
// default kindest/node), any other non-empty value is an image reference used as is, and empty or
// "auto" picks stock where a registry answers or the image is present, offline otherwise.
const Env = "LIMITBED_NODE_IMAGE"

// Stock is kind's default node image for the kind library in go.mod.
const Stock = defaults.Image

// OfflineRepo is the repository of the images scripts/node-image.sh builds.
const OfflineRepo = "limitbed/kind-node"

// Image is the image the cluster's nodes run.
type Image struct {
	Ref string
	// Offline is true for the image built by scripts/node-image.sh: it has no kindnetd, and on a
	// cgroup v1 host its kubelet needs failCgroupV1: false. Nothing pulls it: it must be built.
	Offline bool
}

// Probes are what "auto" asks of the machine; tests replace them.
type Probes struct {
	Present  func(ctx context.Context, ref string) bool // the image is in the Docker store
	Registry func(ctx context.Context) bool             // an image registry answers
}

// MachineProbes asks the Docker engine and Docker Hub's registry.
var MachineProbes = Probes{Present: Present, Registry: registryReachable}

// Choose picks the node image per Env (read from the environment).
func Choose(ctx context.Context, logger *slog.Logger, root string) (Image, error) {
	return ChooseWith(ctx, logger, root, os.Getenv(Env), MachineProbes)
}

// ChooseWith picks the node image for the value mode of Env.
func ChooseWith(ctx context.Context, logger *slog.Logger, root, mode string, p Probes) (Image, error) {
	switch mode = strings.TrimSpace(mode); mode {
	case "", "auto":
		if p.Present(ctx, Stock) || p.Registry(ctx) {
			logger.Info("node image: stock (a registry answers; LIMITBED_NODE_IMAGE=offline uses the locally built one)", "image", Stock)
			return Image{Ref: Stock}, nil
		}
		logger.Info("node image: no registry reachable, the offline node image")
		return offline(ctx, root)
	case "stock":
		return Image{Ref: Stock}, nil
	case "offline":
		return offline(ctx, root)
	default:
		return Image{Ref: mode, Offline: strings.HasPrefix(mode, OfflineRepo+":")}, nil
	}
}

func offline(ctx context.Context, root string) (Image, error) {
	ref, err := OfflineRef(ctx, root)
	if err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Offline: true}, nil
}

// OfflineRef asks scripts/node-image.sh for the name its inputs hash to (--print builds nothing).
func OfflineRef(ctx context.Context, root string) (string, error) {
	script := filepath.Join(root, "scripts", "node-image.sh")
	out, err := exec.CommandContext(ctx, script, "--print").Output()
	if err != nil {
		return "", fmt.Errorf("%s --print: %w", script, err)
	}
	ref := strings.TrimSpace(string(out))
	if ref == "" {
		return "", fmt.Errorf("%s --print printed nothing", script)
	}
	return ref, nil
}

// Present reports whether ref is in the Docker store.
func Present(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil
}

// registryProbe is where "auto" checks that images can be pulled.
const registryProbe = "https://registry-1.docker.io/v2/"

// registryReachable reports whether Docker Hub's registry answers at all (401 counts: it is there).
func registryReachable(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, registryProbe, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
