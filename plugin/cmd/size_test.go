package cmd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxNodeBinary bounds each node binary, stripped, as scripts/build-go.sh builds it for make go and
// the plugin image: 35 MB (issue 31; they were 48-51 MB before grpc lost its trace pages and the
// scheduler the kubelet device-plugin API).
const maxNodeBinary = 35_000_000

// TestNodeBinarySizes builds the node binaries through scripts/build-go.sh, the one place their
// flags and tags are written, and fails on any over maxNodeBinary. It prints each one's size and
// package count (go list -deps, with the same tags) either way.
func TestNodeBinarySizes(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go toolchain on PATH to build the node binaries: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	pkgs := make([]string, len(required))
	for i, name := range required {
		pkgs[i] = "./plugin/cmd/" + name
	}
	build := exec.Command(filepath.Join(root, "scripts", "build-go.sh"), append([]string{out}, pkgs...)...)
	build.Dir = root
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-go.sh: %v\n%s", err, msg)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-20s %12s %9s\n", "binary", "bytes", "packages")
	var over []string
	for i, name := range required {
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("scripts/build-go.sh built no %s: %v", name, err)
		}
		list := exec.Command(goBin, "list", "-tags", "grpcnotrace", "-deps", pkgs[i])
		list.Dir = root
		deps, err := list.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkgs[i], err)
		}
		fmt.Fprintf(&table, "%-20s %12d %9d\n", name, st.Size(), len(strings.Fields(string(deps))))
		if st.Size() > maxNodeBinary {
			over = append(over, fmt.Sprintf("%s (%d bytes)", name, st.Size()))
		}
	}
	t.Logf("node binaries as scripts/build-go.sh builds them (bound %d bytes):\n%s", maxNodeBinary, table.String())
	if len(over) > 0 {
		t.Errorf("over the bound of %d bytes: %s\n%s", maxNodeBinary, strings.Join(over, ", "), table.String())
	}
}
