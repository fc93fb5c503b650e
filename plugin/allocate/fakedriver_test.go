package allocate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// TestFakeDriverMountsAtFakegpuDefaults proves that the fake driver's profile
// and state land on the paths fakegpu uses when its environment variables are
// unset (ssh, su -, cron lose them), that the host side of each mount is the
// configured one, and that the variables the plugin still sets agree with
// those defaults. The defaults are read from fakegpu's sources, so the two
// cannot drift apart.
func TestFakeDriverMountsAtFakegpuDefaults(t *testing.T) {
	root := cbuild.RepoRoot()
	configH, err := os.ReadFile(filepath.Join(root, "fakegpu", "src", "config.h"))
	if err != nil {
		t.Fatal(err)
	}
	configC, err := os.ReadFile(filepath.Join(root, "fakegpu", "src", "config.c"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define FG_DEFAULT_PROFILE "([^"]+)"`).FindSubmatch(configH)
	if m == nil {
		t.Fatal("FG_DEFAULT_PROFILE not found in fakegpu/src/config.h")
	}
	defaultProfile := string(m[1])
	// state_dir(): the first choice when FAKEGPU_STATE_DIR is unset.
	m = regexp.MustCompile(`access\("([^"]+)", W_OK \| X_OK\)`).FindSubmatch(configC)
	if m == nil {
		t.Fatal("default state dir not found in fakegpu/src/config.c state_dir()")
	}
	defaultState := string(m[1])

	if ContainerFakeProfile != defaultProfile || ContainerFakeStateDir != defaultState {
		t.Fatalf("container paths %s, %s; fakegpu defaults %s, %s",
			ContainerFakeProfile, ContainerFakeStateDir, defaultProfile, defaultState)
	}

	a, _ := newAllocator(t, func(o *Options) {
		o.FakeDriver = &FakeDriver{LibDir: "/opt/fakegpu/lib", ProfilePath: "/opt/fakegpu/a16.profile", StateDir: "/srv/fakegpu-state"}
	})
	resp, err := a.Allocate(mkReq("ufd", "c", nil, devA))
	if err != nil {
		t.Fatal(err)
	}
	got := mountsByPath(resp)
	want := []struct {
		container, host string
		readOnly        bool
	}{
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/opt/fakegpu/lib/libcuda.so.1", true},
		{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/opt/fakegpu/lib/libnvidia-ml.so.1", true},
		{defaultProfile, "/opt/fakegpu/a16.profile", true},
		{defaultState, "/srv/fakegpu-state", false},
	}
	for _, w := range want {
		mt := got[w.container]
		if mt == nil || mt.HostPath != w.host || mt.ReadOnly != w.readOnly {
			t.Errorf("mount %s = %+v, want host %s read-only %v", w.container, mt, w.host, w.readOnly)
		}
	}
	for k, v := range map[string]string{EnvFakeGPUProfile: defaultProfile, EnvFakeGPUStateDir: defaultState} {
		if resp.Envs[k] != v {
			t.Errorf("env %s = %q, want the default %q", k, resp.Envs[k], v)
		}
	}
}

func TestShareFakeState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ShareFakeState(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("state dir mode %v (%v), want drwxrwxrwt", fi.Mode(), err)
	}
	if err := ShareFakeState(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing dir: %v, want an error naming it", err)
	}
}
