package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunRejectsBadFlags: run fails before doing anything, with an error
// that names the offending flag (or its environment twin).
func TestRunRejectsBadFlags(t *testing.T) {
	badConfig := filepath.Join(t.TempDir(), "device-config.yaml")
	if err := os.WriteFile(badConfig, []byte("nvidia:\n  enforcement: shoot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		mention string
	}{
		{"unknown flag", []string{"--node-name=n", "--bogus"}, nil, "-bogus"},
		{"missing node name", nil, nil, "--node-name"},
		{"bad duration", []string{"--node-name=n", "--grace-period=soon"}, nil, "-grace-period"},
		{"bad env twin", []string{"--node-name=n"}, map[string]string{"SWEEP_INTERVAL": "often"}, "--sweep-interval"},
		{"zero interval", []string{"--node-name=n", "--sweep-interval=0s"}, nil, "--sweep-interval"},
		{"zero scrape timeout", []string{"--node-name=n", "--scrape-timeout=0s"}, nil, "--scrape-timeout"},
		{"negative accounting interval", []string{"--node-name=n", "--accounting-interval=-1s"}, nil, "--accounting-interval"},
		{"zero compute margin", []string{"--node-name=n", "--compute-margin=0"}, nil, "--compute-margin"},
		{"compute margin over 1", []string{"--node-name=n"}, map[string]string{"COMPUTE_MARGIN": "1.5"}, "--compute-margin"},
		{"bad context allowance", []string{"--node-name=n", "--context-allowance=1GiB"}, nil, "-context-allowance"},
		{"bad enforcement", []string{"--node-name=n", "--device-config-file=" + badConfig}, nil, `enforcement: "shoot" is not one of report|kill`},
		{"unreadable kubeconfig", []string{"--node-name=n", "--kubeconfig=/nonexistent/kubeconfig"}, nil, "/nonexistent/kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, tc.args, getenv)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want it to name %q", err, tc.mention)
			}
		})
	}
}

// TestRunStopsOnCancel: with valid flags run keeps sweeping (the API server
// is unreachable, so each sweep removes nothing) until ctx is cancelled,
// then returns nil.
func TestRunStopsOnCancel(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := t.TempDir()
	dead := filepath.Join(hook, "vgpu", "containers", "dead_main")
	if err := os.MkdirAll(dead, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dead, old, old); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--node-name=n1", "--kubeconfig=" + kubeconfig, "--hook-path=" + hook,
			"--pod-resources-socket=", "--metrics-address=", "--sweep-interval=10ms", "--grace-period=1s"},
			func(string) string { return "" })
	}()
	time.Sleep(200 * time.Millisecond) // several failing sweeps
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("removed an entry although liveness was unknown: %v", err)
	}
}
