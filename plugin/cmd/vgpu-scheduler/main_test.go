package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// TestRunRejectsBadFlags: run fails before doing anything, with an error that names the
// offending flag (or its environment twin).
func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		mention string
	}{
		{"unknown flag", []string{"--bogus"}, nil, "-bogus"},
		{"period too short", []string{"--period=1ms"}, nil, "--period"},
		{"bad env twin", nil, map[string]string{"PERIOD": "often"}, "--period"},
		{"drain wait not under the period", []string{"--period=50ms", "--drain-wait=50ms"}, nil, "--drain-wait"},
		{"zero drain wait", []string{"--drain-wait=0s"}, nil, "--drain-wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			err := run(context.Background(), tc.args, getenv)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %v, want it to name %q", err, tc.mention)
			}
		})
	}
}

// TestRunSchedulesAndStops: with a container's grant file under --hook-path, run drives it
// (its entry leaves Off: the container is identified from its limits file) until ctx is
// cancelled, and then sets it Off again.
func TestRunSchedulesAndStops(t *testing.T) {
	hook := t.TempDir()
	containers := filepath.Join(hook, "vgpu", "containers")
	grants := filepath.Join(hook, "vgpu", "sched")
	for _, d := range []string{filepath.Join(containers, "uid1_main"), grants} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(containers, "uid1_main.limits"), []byte("CUDA_DEVICE_SM_LIMIT=30\nGPU_CORE_UTILIZATION_POLICY=force\nHAMI_LIMITS_FORMAT=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := schedproto.ParseUUID("GPU-3c5a7e21-8f4b-4d2a-9b61-0a1c2d3e4f50")
	b, _ := schedproto.GrantSpec{GPUs: []schedproto.UUID{u}}.Bytes()
	gp := filepath.Join(grants, "uid1_main.grant")
	if err := os.WriteFile(gp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	state := func() schedproto.State {
		data, _ := os.ReadFile(gp)
		_, words, err := schedproto.DecodeGrant(data)
		if err != nil {
			t.Fatal(err)
		}
		_, s := schedproto.SplitWord(words[0])
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--hook-path=" + hook, "--metrics-address="}, func(string) string { return "" })
	}()
	for end := time.Now().Add(10 * time.Second); state() != schedproto.Wait; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("entry %v after 10 s, want wait", state())
		}
	}
	// A second scheduler on the same hook path exits at once, naming the first; it never
	// touched the first's grant words. (A new grant file already says Wait: the first has
	// claimed the path once its lock file names it.)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(grants, timeslice.LockName)); len(b) > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the first scheduler never claimed the hook path")
		}
	}
	start := time.Now()
	err := run(context.Background(), []string{"--hook-path=" + hook, "--metrics-address="}, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "another vgpu-scheduler drives") || !strings.Contains(err.Error(), "pid ") {
		t.Errorf("second scheduler: %v, want it refused naming the first", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second scheduler took %v to give up, want at once", d)
	}
	if s := state(); s != schedproto.Wait {
		t.Errorf("entry %v after the second scheduler's attempt, want the first's wait", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := state(); s != schedproto.Off {
		t.Errorf("entry %v after shutdown, want off", s)
	}
}
