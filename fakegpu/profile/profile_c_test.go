package profile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

// TestSameAsFakegpu runs every shipped profile, every malformed case of badCases and the fuzz
// seeds through both readers, this package and fakegpu's profile.c (built here with a small
// driver, testdata/dump.c), and requires the same values or the same error for each.
func TestSameAsFakegpu(t *testing.T) {
	root := cbuild.RepoRoot()
	src := filepath.Join(root, "fakegpu", "src")
	bin := cbuild.Program(t, []string{"fakegpu/src", "abi/include"},
		"testdata/dump.c", filepath.Join(src, "profile.c"), filepath.Join(src, "log.c"))

	paths, err := filepath.Glob(filepath.Join(root, "fakegpu", "profiles", "*.profile"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no shipped profiles: %v", err)
	}
	dir := t.TempDir()
	for i, text := range append(badCases(), seeds()...) {
		p := filepath.Join(dir, fmt.Sprintf("case%02d.profile", i))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}

	out, err := exec.Command(bin, paths...).Output()
	if err != nil {
		t.Fatalf("C reader: %v", err)
	}
	cBlocks := strings.SplitAfter(string(out), "\n== ")
	if len(cBlocks) != len(paths) {
		t.Fatalf("C reader dumped %d files, want %d:\n%s", len(cBlocks), len(paths), out)
	}
	for i, path := range paths {
		_, err := Load(path)
		goDump := dump(path)
		cDump := "== " + strings.TrimSuffix(strings.TrimPrefix(cBlocks[i], "== "), "== ")
		if goDump != cDump {
			text, _ := os.ReadFile(path)
			t.Errorf("%s: the readers differ\n--- Go:\n%s--- C:\n%s--- profile:\n%s", filepath.Base(path), goDump, cDump, text)
		}
		if strings.Contains(path, "/fakegpu/profiles/") && err != nil {
			t.Errorf("shipped profile %s: %v", path, err)
		}
	}
}
