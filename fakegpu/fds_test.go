package fakegpu_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

// A program that forks before cuInit keeps every descriptor it had, with either library
// preloaded (as HAMi-core linked with --no-as-needed, or any program linked with -lcuda, loads
// them): standard input, output and error, and one it opened itself. The reference is the same
// shell without the preload. login read its terminal from a standard input that fakegpu's fork
// handler had closed.
func TestPreloadForkKeepsDescriptors(t *testing.T) {
	t.Parallel()
	h := fakegputest.NewHost(t, "a16-16q")
	// bash forks for readlink (not the last command); the child's fork handlers run before it.
	script := `exec 7<"$1"; readlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2 /proc/self/fd/7; :`
	run := func(t *testing.T, preload string) string {
		t.Helper()
		dir := t.TempDir()
		files := map[string]*os.File{}
		for _, name := range []string{"in", "out", "err", "extra"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files[name] = f
		}
		c := exec.Command("bash", "-c", script, "bash", files["extra"].Name())
		c.Env = h.Env
		if preload != "" {
			c.Env = append(c.Env, "LD_PRELOAD="+filepath.Join(h.Paths.Lib, preload))
		}
		c.Stdin, c.Stdout, c.Stderr = files["in"], files["out"], files["err"]
		if err := c.Run(); err != nil {
			t.Fatalf("preload %q: %v", preload, err)
		}
		out, err := os.ReadFile(files["out"].Name())
		if err != nil {
			t.Fatal(err)
		}
		// The same four paths relative to the run's directory, so the runs compare.
		return strings.ReplaceAll(string(out), dir+"/", "")
	}
	want := run(t, "")
	if want != "in\nout\nerr\nextra\n" {
		t.Fatalf("the reference run itself: %q", want)
	}
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so.1 libnvidia-ml.so.1"} {
		lib := lib
		t.Run(strings.ReplaceAll(lib, " ", "+"), func(t *testing.T) {
			preload := strings.ReplaceAll(lib, " ", " "+h.Paths.Lib+"/")
			if got := run(t, preload); got != want {
				t.Errorf("the forked child's descriptors 0, 1, 2, 7 under LD_PRELOAD=%s:\n%s\nwant:\n%s", lib, got, want)
			}
		})
	}
}
