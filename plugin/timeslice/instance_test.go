package timeslice

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// One scheduler per grant directory: a second claim fails at once naming the first; the lock is
// the first's until it releases it or ends (the kernel's, whatever ended it).
func TestClaimOnePerGrantDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vgpu", "sched")
	first, err := Claim(dir, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	_, err = Claim(dir, time.Now())
	if err == nil {
		t.Fatal("a second scheduler claimed the same grant directory")
	}
	for _, want := range []string{"another vgpu-scheduler drives " + dir, "host " + host, "2023-11-14T22:13:20Z", "maxSurge 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Claim(dir, time.Now())
	if err != nil {
		t.Fatalf("after the first released it: %v", err)
	}
	again.Release()

	// A holder that dies without releasing: the kernel drops the lock with the process.
	cmd := exec.Command("flock", "--no-fork", "-x", filepath.Join(dir, LockName), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("flock(1) (util-linux) holds the lock from another process: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got *Instance
		if got, err = Claim(dir, time.Now()); err != nil || time.Now().After(deadline) {
			break
		}
		got.Release()
		time.Sleep(20 * time.Millisecond) // flock(1) may not hold it yet
	}
	if err == nil || !strings.Contains(err.Error(), "it has not said who it is yet") {
		t.Errorf("held by another process: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	inst, err := Claim(dir, time.Now())
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	inst.Release()
}
