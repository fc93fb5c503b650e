package kindcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"
)

// EnvNodeImage selects the node image: "offline" (build it with scripts/node-image.sh), "stock"
// (kind's default kindest/node), any other non-empty value is an image reference used as is, and
// empty or "auto" picks stock where a registry answers and offline where none does.
const EnvNodeImage = "LIMITBED_NODE_IMAGE"

// NodeImage is the image the cluster's nodes run.
type NodeImage struct {
	Ref string
	// Offline is true for the image built by scripts/node-image.sh: it has no kindnetd, and on a
	// cgroup v1 host its kubelet needs failCgroupV1: false.
	Offline bool
}

// stockImage is kind's default node image for the kind library version in go.mod.
var stockImage = defaults.Image

// registryProbe is where "auto" checks that images can be pulled.
var registryProbe = "https://registry-1.docker.io/v2/"

// ResolveNodeImage picks the node image per EnvNodeImage, building the offline one when needed
// (cached by the script: seconds when up to date).
func ResolveNodeImage(ctx context.Context, logger *slog.Logger, root string) (NodeImage, error) {
	mode := strings.TrimSpace(os.Getenv(EnvNodeImage))
	switch mode {
	case "", "auto":
		if imagePresent(ctx, stockImage) || registryReachable(ctx) {
			logger.Info("node image: stock (a registry answers; LIMITBED_NODE_IMAGE=offline builds one locally)", "image", stockImage)
			return NodeImage{Ref: stockImage}, nil
		}
		logger.Info("node image: no registry reachable, building the offline node image")
		return BuildOfflineNodeImage(ctx, logger, root)
	case "stock":
		return NodeImage{Ref: stockImage}, nil
	case "offline":
		return BuildOfflineNodeImage(ctx, logger, root)
	default:
		return NodeImage{Ref: mode, Offline: strings.HasPrefix(mode, "limitbed/kind-node:")}, nil
	}
}

// BuildOfflineNodeImage runs scripts/node-image.sh, logging its progress lines, and returns the
// image it printed last.
func BuildOfflineNodeImage(ctx context.Context, logger *slog.Logger, root string) (NodeImage, error) {
	script := filepath.Join(root, "scripts", "node-image.sh")
	cmd := exec.CommandContext(ctx, script)
	cmd.Dir = root
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "node-image: ") {
				logger.Info(line)
			}
			if tail = append(tail, line); len(tail) > 40 {
				tail = tail[1:]
			}
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return NodeImage{}, fmt.Errorf("build the offline node image (%s): %w\n%s", script, err, strings.Join(tail, "\n"))
	}
	lines := strings.Fields(stdout.String())
	if len(lines) == 0 {
		return NodeImage{}, fmt.Errorf("%s printed no image name", script)
	}
	return NodeImage{Ref: lines[len(lines)-1], Offline: true}, nil
}

func imagePresent(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil
}

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
