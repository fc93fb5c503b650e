// Package scripts holds the tests of the bash scripts beside them: each test runs a script from a
// copy of the tree with stub commands first on PATH, so it is fast and touches nothing shared.
package scripts

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/tier"
)

// repoRoot is the repository root: go test runs in this directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// copyTree copies files and directories (relative to the repository root) into a new directory,
// keeping their modes, and returns it.
func copyTree(t *testing.T, paths ...string) string {
	t.Helper()
	src, dst := repoRoot(t), t.TempDir()
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(src, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			info, err := d.Info()
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
		})
		if err != nil {
			t.Fatalf("copy %s: %v", p, err)
		}
	}
	return dst
}

// stub writes an executable shell script NAME with BODY into dir.
func stub(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// needTools skips (fails under CI=true) when a command the script needs is missing here.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		tier.Require(t, tier.Tool(tool))
	}
}

// needRoot skips (fails under CI=true, which runs as root) when not root.
func needRoot(t *testing.T, why string) {
	t.Helper()
	tier.Require(t, tier.Root.For(why))
}

// env is the test process's environment with PATH led by dir and the given variables set.
func env(dir string, vars ...string) []string {
	out := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

// lines splits output into lines, without a trailing empty one.
func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
