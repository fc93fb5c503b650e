// Package cmd_test holds the production binaries of plugin/cmd to what they may link: an operator
// runs them on a production node or against a production cluster, so no test double and no test
// framework may ride along.
package cmd_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// required are the binaries the test must find, so that it cannot pass by listing nothing.
var required = []string{
	"vgpu-device-plugin",
	"vgpu-monitor",
	"vgpu-scheduler",
	"limitbed-doctor",
}

// forbidden says why pkg (an import path) may not be linked into a production binary, or "".
func forbidden(pkg string) string {
	for _, p := range []struct{ prefix, why string }{
		{"sigs.k8s.io/kind", "the kind library (the kind tier's)"},
		{"github.com/testcontainers/", "testcontainers-go (the Docker tier's)"},
		{"helm.sh/helm", "the Helm SDK (the kind tier's chart install)"},
	} {
		if pkg == strings.TrimSuffix(p.prefix, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(p.prefix, "/")+"/") {
			return p.why
		}
	}
	switch pkg {
	case "testing", "net/http/httptest", "testing/fstest":
		return "the standard library's test support (a test helper)"
	}
	// This module names its test helpers ...test (sandboxtest, sharetest).
	ours := strings.HasPrefix(pkg, "github.com/limitbed/limitbed/")
	for _, elem := range strings.Split(pkg, "/") {
		switch {
		case strings.HasSuffix(elem, "mock") || strings.HasSuffix(elem, "mocks"):
			return "a mock package"
		case strings.HasPrefix(elem, "fake"):
			return "a fake (test double) package"
		case ours && strings.HasSuffix(elem, "test"):
			return "a test helper package"
		}
	}
	return ""
}

// TestProductionBinariesLinkNoTestDoubles runs `go list -deps` on every main package under
// plugin/cmd and fails on any mock or fake package, a test helper, kind, testcontainers-go or the
// Helm SDK. k8s.io/client-go/testing is linked by client-go itself (its gentype package) into
// every client and is not ours to remove.
func TestProductionBinariesLinkNoTestDoubles(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go toolchain on PATH to list the binaries' dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list ./plugin/cmd/...: %v", err)
	}
	mains := strings.Fields(string(out))
	for _, name := range required {
		if !slices.ContainsFunc(mains, func(m string) bool { return strings.HasSuffix(m, "/"+name) }) {
			t.Errorf("no main package plugin/cmd/%s (found %v)", name, mains)
		}
	}
	for _, m := range mains {
		deps, err := exec.Command(goBin, "list", "-deps", m).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", m, err)
		}
		for _, pkg := range strings.Fields(string(deps)) {
			if why := forbidden(pkg); why != "" {
				t.Errorf("%s links %s: %s", m, pkg, why)
			}
			if isHarness(pkg) {
				t.Errorf("%s links %s: harness code in a production binary", m, pkg)
			}
		}
	}
}

// harnessRoot is the test bed's tree: production depends on none of it; the test bed depends on
// production.
const harnessRoot = "github.com/limitbed/limitbed/harness"

func isHarness(pkg string) bool { return pkg == harnessRoot || strings.HasPrefix(pkg, harnessRoot+"/") }

// TestNoProductionPackageImportsHarness holds every package under plugin/ (its production code,
// not its tests) to importing nothing of harness/, directly or through another package: what the
// operator's tool and the test bed share lives under plugin/ (plugin/ctrexec, plugin/podexec,
// plugin/launch, plugin/nvsmi) and the harness imports it.
func TestNoProductionPackageImportsHarness(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go toolchain on PATH to list the packages' imports: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list -deps ./plugin/...: %v", err)
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "github.com/limitbed/limitbed/") {
			continue
		}
		pkgs++
		if isHarness(fields[0]) {
			t.Errorf("a package under plugin/ depends on %s", fields[0])
		}
		for _, imp := range fields[1:] {
			if isHarness(imp) {
				t.Errorf("%s imports %s: production code must not depend on the test bed", fields[0], imp)
			}
		}
	}
	if pkgs < 20 {
		t.Fatalf("go list -deps ./plugin/... listed %d of this module's packages: not the production tree", pkgs)
	}
}

// TestForbidden holds the classifier to the packages it must catch and the ones it must let by.
func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		pkg  string
		want bool
	}{
		{"github.com/NVIDIA/go-nvml/pkg/nvml/mock", true},
		{"github.com/limitbed/limitbed/plugin/gpu/gpumock", true},
		{"github.com/limitbed/limitbed/plugin/deviceplugin/fakekubelet", true},
		{"github.com/limitbed/limitbed/harness/sandbox/sandboxtest", true},
		{"k8s.io/client-go/kubernetes/fake", true},
		{"sigs.k8s.io/kind/pkg/cluster", true},
		{"sigs.k8s.io/kind", true},
		{"github.com/testcontainers/testcontainers-go", true},
		{"helm.sh/helm/v3/pkg/action", true},
		{"testing", true},
		{"net/http/httptest", true},
		{"k8s.io/client-go/testing", false},
		{"k8s.io/client-go/tools/clientcmd/api/latest", false},
		{"internal/synctest", false},
		{"github.com/NVIDIA/go-nvml/pkg/nvml", false},
		{"github.com/limitbed/limitbed/plugin/gpu", false},
		{"sigs.k8s.io/yaml", false},
		{"k8s.io/client-go/kubernetes", false},
	} {
		if got := forbidden(tc.pkg) != ""; got != tc.want {
			t.Errorf("forbidden(%q) = %v, want %v", tc.pkg, got, tc.want)
		}
	}
}
