package kindcluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/nodeimage/nodeimagetest"
)

// TestResolveNodeImageNeverBuilds: the kind tier's test resolves the offline node image but never
// builds it — the build (tens of minutes on a cold machine) belongs to make e2e's first step, before
// any deadline of the test. An offline image that is not built yet makes ResolveNodeImage fail at
// once with the command that builds it; the script is only asked for the name (--print).
func TestResolveNodeImageNeverBuilds(t *testing.T) {
	root, calls := nodeimagetest.Checkout(t, "limitbed/kind-node:v0.0.0-nosuchimage")
	t.Setenv(EnvNodeImage, "offline")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	img, err := ResolveNodeImage(ctx, discard(), root)
	got, _ := os.ReadFile(calls)
	for _, line := range strings.Split(strings.TrimSpace(string(got)), "\n") {
		if line != "--print" {
			t.Errorf("scripts/node-image.sh ran with %q: the test set-up built the node image", line)
		}
	}
	if err == nil {
		t.Fatalf("ResolveNodeImage = %+v, want an error: the image is not built", img)
	}
	for _, want := range []string{"limitbed/kind-node:v0.0.0-nosuchimage", "make node-image", "make e2e"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
