// Package fakegputest is a simulated GPU machine for tests: fakegpu's libraries and tools built
// (internal/cbuild), a device profile and a state directory that every process started through
// the Host shares, as the processes of one machine share its GPUs; and the JSON lines of cudaprobe
// and gpuinfo --json (fakegpu/tools) decoded. fakegpu's own Go tests (fakegpu/*_test.go: go-nvml
// in process, the tools as separate processes) and the harness's tests use it. It is a test
// helper: no production binary links it (plugin/cmd's TestProductionBinariesLinkNoTestDoubles).
package fakegputest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// Probe is cudaprobe's JSON line.
type Probe struct {
	RequestedMiB int     `json:"requested_mib"`
	GrantedMiB   int     `json:"granted_mib"`
	Error        *string `json:"error"`
	TotalMiB     int     `json:"total_mib"`
	FreeMiB      int     `json:"free_mib"`
	PID          int     `json:"pid"`
	API          string  `json:"api"`
	Alloc        string  `json:"alloc"`
	Launched     int     `json:"launched"`
	LaunchError  *string `json:"launch_error"`
	Name         string  `json:"name"`
	UUID         string  `json:"uuid"`
	Driver       int     `json:"driver_version"`
}

// Info is gpuinfo --json.
type Info struct {
	DriverVersion string `json:"driver_version"`
	CUDAVersion   int    `json:"cuda_version"`
	Devices       []struct {
		Index int    `json:"index"`
		Name  string `json:"name"`
		UUID  string `json:"uuid"`
		Used  int    `json:"memory_used_mib"`
		Total int    `json:"memory_total_mib"`
		Util  *int   `json:"utilization_gpu"`
		Clock *int   `json:"sm_clock_mhz"`
		Error string `json:"error"`
		MIG   []struct {
			UUID  string `json:"uuid"`
			Name  string `json:"name"`
			GI    int    `json:"gi"`
			Total int    `json:"memory_total_mib"`
			Used  int    `json:"memory_used_mib"`
		} `json:"mig"`
		Processes []struct {
			PID    int  `json:"pid"`
			Used   int  `json:"used_mib"`
			GI     *int `json:"gi"`
			SMUtil *int `json:"sm_util"`
		} `json:"processes"`
	} `json:"devices"`
}

// Host is one simulated machine: a profile and a state directory that its processes share.
type Host struct {
	t testing.TB
	// Paths are the C build's.
	Paths cbuild.Paths
	// Env is every process's environment: the libraries' path, the profile, the state
	// directory, PATH (and ASAN_OPTIONS when set), then the extra variables of NewHost.
	Env []string
}

// NewHost builds fakegpu and returns a machine of profile (a name in fakegpu/profiles) with a fresh
// state directory; extra ("NAME=value") is added to every process's environment.
func NewHost(t testing.TB, profile string, extra ...string) *Host {
	t.Helper()
	p := cbuild.Build(t)
	env := []string{
		"LD_LIBRARY_PATH=" + p.Lib,
		"FAKEGPU_PROFILE=" + profile,
		"FAKEGPU_PROFILE_DIR=" + filepath.Join(p.Root, "fakegpu", "profiles"),
		"FAKEGPU_STATE_DIR=" + t.TempDir(),
		"PATH=" + os.Getenv("PATH"),
	}
	if v := os.Getenv("ASAN_OPTIONS"); v != "" {
		env = append(env, "ASAN_OPTIONS="+v)
	}
	return &Host{t: t, Paths: p, Env: append(env, extra...)}
}

// Cmd is tool (a fakegpu tool of the build) with args, in the machine's environment, not started.
func (h *Host) Cmd(tool string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(h.Paths.Bin, tool), args...)
	c.Env = h.Env
	return c
}

// Run runs a tool to completion: stdout, stderr, exit code (a signal death fails the test).
func (h *Host) Run(tool string, args ...string) (string, string, int) {
	h.t.Helper()
	c := h.Cmd(tool, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if !ee.Exited() {
			h.t.Fatalf("%s %v died: %v\nstderr: %s", tool, args, err, errb.String())
		}
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("%s %v: %v", tool, args, err)
	}
	return out.String(), errb.String(), code
}

// Probe runs cudaprobe with args and returns its JSON line; a non-zero exit fails the test.
func (h *Host) Probe(args ...string) Probe {
	h.t.Helper()
	out, stderr, code := h.Run("cudaprobe", args...)
	if code != 0 {
		h.t.Fatalf("cudaprobe %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, stderr)
	}
	return Decode[Probe](h.t, out)
}

// Info runs gpuinfo --json; a non-zero exit fails the test.
func (h *Host) Info() Info {
	h.t.Helper()
	out, stderr, code := h.Run("gpuinfo", "--json")
	if code != 0 {
		h.t.Fatalf("gpuinfo: exit %d: %s", code, stderr)
	}
	return Decode[Info](h.t, out)
}

// Hold starts a cudaprobe that keeps its memory until killed (at the test's end at the latest);
// returns it and its JSON line.
func (h *Host) Hold(args ...string) (*exec.Cmd, Probe) {
	h.t.Helper()
	c := h.Cmd("cudaprobe", append(args, "--hold-until-signal")...)
	out, err := c.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		h.t.Fatalf("holder: %v\nstderr: %s", err, stderr.String())
	}
	return c, Decode[Probe](h.t, line)
}

// Decode decodes one JSON line (surrounding space ignored) or fails the test.
func Decode[T any](t testing.TB, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}
