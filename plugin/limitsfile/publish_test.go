package limitsfile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var allSteps = []Step{StepCreate, StepWrite, StepSync, StepChmod, StepClose, StepRename, StepDirSync}

const (
	oldContent = "CUDA_DEVICE_MEMORY_LIMIT_0=1000m\nHAMI_LIMITS_FORMAT=1\n"
	newContent = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\nHAMI_LIMITS_FORMAT=1\n"
)

// Environment of the re-exec'd crash helper (see TestMain).
const (
	envCrashStep = "LIMITSFILE_CRASH_STEP"
	envCrashPath = "LIMITSFILE_CRASH_PATH"
)

func TestMain(m *testing.M) {
	if step := os.Getenv(envCrashStep); step != "" {
		// Helper mode: publish and get SIGKILLed at the requested step.
		err := Publisher{FS: faultFS{hook: killAt(Step(step))}}.Publish(os.Getenv(envCrashPath), []byte(newContent))
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		os.Exit(0) // the step was never reached
	}
	os.Exit(m.Run())
}

func tempNames(t *testing.T, dir string) []string {
	t.Helper()
	names, err := OSFS{}.ReadDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := TempOwner(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// assertWhole fails unless path holds exactly one of the allowed contents
// (or is absent when absentOK): never a prefix, never a mix.
func assertWhole(t *testing.T, path string, absentOK bool, allowed ...string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && absentOK {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allowed {
		if string(got) == a {
			return
		}
	}
	t.Fatalf("%s holds %q, want one of %q", path, got, allowed)
}

func TestPublishWritesAtomicallyWithMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "uid_ctr.limits")
	p := Publisher{}
	for _, content := range []string{oldContent, newContent} {
		if err := p.Publish(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		assertWhole(t, path, false, content)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode = %v, want 0644", st.Mode().Perm())
	}
	if tmp := tempNames(t, dir); len(tmp) != 0 {
		t.Fatalf("temp files left: %v", tmp)
	}
}

// TestPublishInjectedFailure fails each step in turn, over no file and over
// an existing one: the error names the step and a path, the final name holds
// the old or new file whole (new only once the rename happened), and no temp
// file is left.
func TestPublishInjectedFailure(t *testing.T) {
	for _, step := range allSteps {
		for _, existing := range []bool{false, true} {
			name := string(step)
			if existing {
				name += "/over-existing"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "uid_ctr.limits")
				if existing {
					if err := os.WriteFile(path, []byte(oldContent), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				err := Publisher{FS: faultFS{hook: failAt(step)}}.Publish(path, []byte(newContent))
				var se *StepError
				if !errors.As(err, &se) || se.Step != step || !errors.Is(err, errInjected) {
					t.Fatalf("err = %v, want a StepError at %s wrapping the injected error", err, step)
				}
				if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), string(step)) {
					t.Fatalf("error %q does not name the path and the step", err)
				}
				switch {
				case step == StepDirSync:
					assertWhole(t, path, false, newContent) // renamed, but the caller still fails
				case existing:
					assertWhole(t, path, false, oldContent)
				default:
					assertWhole(t, path, true)
				}
				if tmp := tempNames(t, dir); len(tmp) != 0 {
					t.Fatalf("temp files left after failure at %s: %v", step, tmp)
				}
			})
		}
	}
}

// TestPublishKilled re-executes this test binary, which SIGKILLs itself just
// before each step. Whatever the step, the final name never holds a partial
// file; a leftover temp file is removed by the next Publish.
func TestPublishKilled(t *testing.T) {
	for _, step := range allSteps {
		t.Run(string(step), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "uid_ctr.limits")
			if err := os.WriteFile(path, []byte(oldContent), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envCrashStep+"="+string(step), envCrashPath+"="+path)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("helper was not killed: %v (stderr %q)", err, stderr.String())
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("helper ended with %v, want SIGKILL (stderr %q)", err, stderr.String())
			}
			if step == StepDirSync {
				assertWhole(t, path, false, newContent)
			} else {
				assertWhole(t, path, false, oldContent)
			}
			// Steps after create leave the temp behind: nothing can clean up
			// after SIGKILL. The next Publish of the same file must.
			left := tempNames(t, dir)
			wantLeft := 1
			if step == StepCreate || step == StepDirSync {
				wantLeft = 0
			}
			if len(left) != wantLeft {
				t.Fatalf("expected the killed writer's temp file, found %v", left)
			}
			if err := (Publisher{}).Publish(path, []byte(newContent)); err != nil {
				t.Fatal(err)
			}
			assertWhole(t, path, false, newContent)
			if tmp := tempNames(t, dir); len(tmp) != 0 {
				t.Fatalf("temp files left after the next Publish: %v", tmp)
			}
		})
	}
}

func TestTempOwner(t *testing.T) {
	for name, want := range map[string]string{
		".uid_ctr.limits.tmp-123": "uid_ctr.limits",
		"uid_ctr.limits":          "",
		"uid_ctr":                 "",
		".tmp-1":                  "",
		"..tmp-1":                 "",
	} {
		got, ok := TempOwner(name)
		if got != want || ok != (want != "") {
			t.Errorf("TempOwner(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if got, _ := TempOwner(TempPattern("a_b.limits")[:len(TempPattern("a_b.limits"))-1] + "xyz"); got != "a_b.limits" {
		t.Errorf("TempPattern and TempOwner disagree: %q", got)
	}
}
