package fakegpu_test

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
	"time"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// probe is cudaprobe's JSON line.
type probe struct {
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

// info is gpuinfo --json.
type info struct {
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

// host is one simulated machine: a profile and a state directory that its processes share.
type host struct {
	t     *testing.T
	paths cbuild.Paths
	env   []string
}

func newHost(t *testing.T, profile string, extra ...string) *host {
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
	return &host{t: t, paths: p, env: append(env, extra...)}
}

func (h *host) cmd(tool string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(h.paths.Bin, tool), args...)
	c.Env = h.env
	return c
}

// run runs a tool to completion: stdout, stderr, exit code (a signal death fails the test).
func (h *host) run(tool string, args ...string) (string, string, int) {
	h.t.Helper()
	c := h.cmd(tool, args...)
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

func (h *host) probe(args ...string) probe {
	h.t.Helper()
	out, stderr, code := h.run("cudaprobe", args...)
	if code != 0 {
		h.t.Fatalf("cudaprobe %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, stderr)
	}
	return decode[probe](h.t, out)
}

func (h *host) info() info {
	h.t.Helper()
	out, stderr, code := h.run("gpuinfo", "--json")
	if code != 0 {
		h.t.Fatalf("gpuinfo: exit %d: %s", code, stderr)
	}
	return decode[info](h.t, out)
}

// hold starts a cudaprobe that keeps its memory until killed; returns it and its JSON line.
func (h *host) hold(args ...string) (*exec.Cmd, probe) {
	h.t.Helper()
	c := h.cmd("cudaprobe", append(args, "--hold-until-signal")...)
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
	return c, decode[probe](h.t, line)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// eventually polls cond every 50 ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
