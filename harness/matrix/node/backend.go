package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/docker"
)

// BackendEnv chooses the backend: "docker", "host", or unset for the best available.
const BackendEnv = "LIMITBED_BACKEND"

// SelectBackend returns the backend named by want ("" = $LIMITBED_BACKEND, else automatic: docker
// where an engine answers, else host when running as root). The docker backend comes with the
// workload image built. An error wraps sandbox.ErrUnavailable and names what is missing.
func SelectBackend(ctx context.Context, logger *slog.Logger, want string) (sandbox.Backend, error) {
	if want == "" {
		want = os.Getenv(BackendEnv)
	}
	var b sandbox.Backend
	switch want {
	case "docker":
		b = docker.New(logger)
	case "host":
		b = sandbox.NewHost(logger, "")
	case "":
		d := docker.New(logger)
		derr := d.Available(ctx)
		if derr == nil {
			b = d
			break
		}
		h := sandbox.NewHost(logger, "")
		herr := h.Available(ctx)
		if herr != nil {
			return nil, fmt.Errorf("no backend: %w; %w (start docker with scripts/docker-up.sh)", derr, herr)
		}
		logger.Info("docker unavailable; using the host backend (no ssh, no cron)", "why", derr)
		b = h
	default:
		return nil, fmt.Errorf("%s=%q: want docker or host", BackendEnv, want)
	}
	if err := b.Available(ctx); err != nil {
		return nil, fmt.Errorf("backend %s: %w", b.Name(), err)
	}
	if b.Name() == "docker" {
		if err := sandbox.EnsureWorkloadImage(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}
