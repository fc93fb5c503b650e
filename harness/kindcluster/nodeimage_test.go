package kindcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestResolveNodeImageNeverBuilds: the kind tier's test resolves the offline node image but never
// builds it — the build (tens of minutes on a cold machine) belongs to make e2e's first step, before
// any deadline of the test. A node-image.sh that is not built yet makes ResolveNodeImage fail at
// once with the command that builds it; the script is only asked for the name (--print).
func TestResolveNodeImageNeverBuilds(t *testing.T) {
	root := t.TempDir()
	calls := filepath.Join(root, "calls")
	script := "#!/bin/sh\n" +
		"echo \"$*\" >>'" + calls + "'\n" +
		"if [ \"$1\" = --print ]; then echo limitbed/kind-node:v0.0.0-nosuchimage; exit 0; fi\n" +
		"sleep 30\n" + // a build
		"echo limitbed/kind-node:v0.0.0-nosuchimage\n"
	if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scripts", "node-image.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
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
