package monitor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/plugin/paths"
)

// TestRegionFromLibvgpu reads a region written by the real libvgpu.so: a
// cudaprobe holding 1000 MiB under a 3000 MiB limit is one live process with
// 1000 MiB used; once SIGKILLed, the kernel drops its slot lock and the
// monitor stops counting it live at once, while used_total keeps its bytes
// until libvgpu reclaims the slot (no other process claims one here).
func TestRegionFromLibvgpu(t *testing.T) {
	p := cbuild.Build(t)
	tmp := t.TempDir()
	cache := filepath.Join(tmp, paths.UsageCacheName)
	cmd := exec.Command(filepath.Join(p.Bin, "cudaprobe"), "--mib", "1000", "--hold", "30")
	cmd.Env = []string{
		"LD_PRELOAD=" + filepath.Join(p.Lib, "libvgpu.so"),
		"LD_LIBRARY_PATH=" + p.Lib,
		"CUDA_DEVICE_MEMORY_LIMIT_0=3000m",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE=" + cache,
		"FAKEGPU_PROFILE=a16-16q",
		"FAKEGPU_PROFILE_DIR=" + filepath.Join(p.Root, "fakegpu", "profiles"),
		"FAKEGPU_STATE_DIR=" + tmp,
		"PATH=" + os.Getenv("PATH"),
	}
	if v := os.Getenv("ASAN_OPTIONS"); v != "" {
		cmd.Env = append(cmd.Env, "ASAN_OPTIONS="+v)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	// cudaprobe prints its one JSON line after the allocation, then holds.
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatalf("cudaprobe printed nothing in 20 s\nstderr: %s", stderr.String())
	}
	var probe map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &probe); err != nil {
		t.Fatalf("cudaprobe output %q: %v\nstderr: %s", line, err, stderr.String())
	}

	const mib = 1 << 20
	u, err := RegionFiles{}.ReadUsage(cache)
	if err != nil {
		t.Fatalf("%v\ncudaprobe: %s\nstderr: %s", err, line, stderr.String())
	}
	if len(u.Devices) != 1 {
		t.Fatalf("devices = %+v", u.Devices)
	}
	d := u.Devices[0]
	if d.Index != 0 || d.Unlimited || d.LimitBytes != 3000*mib || d.UsedBytes != 1000*mib || d.LiveBytes != 1000*mib {
		t.Fatalf("device 0 = %+v (limit %d MiB, used %d MiB), want limit 3000 MiB, used 1000 MiB",
			d, d.LimitBytes/mib, d.UsedBytes/mib)
	}
	if live := u.Live(); len(live) != 1 || int(live[0].PID) != cmd.Process.Pid || u.DeadSlots() != 0 {
		t.Fatalf("processes = %+v, dead %d; want only pid %d", live, u.DeadSlots(), cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // the kernel has released its locks once it is reaped
	waited = true
	if u, err = (RegionFiles{}).ReadUsage(cache); err != nil {
		t.Fatal(err)
	}
	if len(u.Live()) != 0 || u.DeadSlots() != 1 {
		t.Fatalf("after SIGKILL: processes %+v, dead slots %d; want none live, 1 dead", u.Live(), u.DeadSlots())
	}
	if d := u.Devices[0]; d.UsedBytes != 1000*mib || d.LiveBytes != 0 {
		t.Fatalf("after SIGKILL: device 0 = %+v, want used_total 1000 MiB (unreclaimed), live 0", d)
	}
}
