package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// e2eTree is a copy of scripts/e2e.sh with stub image scripts and a stub go command that record
// their calls, one line each, in the file it returns.
func e2eTree(t *testing.T, choice, failing string) (tree, bin, calls string) {
	t.Helper()
	tree = copyTree(t, "scripts/e2e.sh", "scripts/steps.sh")
	bin = t.TempDir()
	calls = filepath.Join(t.TempDir(), "calls")
	record := `echo "$(basename "$0") $*" >>` + calls
	for _, s := range []string{"docker-up.sh", "node-image.sh", "plugin-image.sh", "workload-image.sh"} {
		body := record
		if s == "plugin-image.sh" {
			body += "\necho \"plugin-image.sh PLUGIN_IMAGE=$PLUGIN_IMAGE\" >>" + calls
		}
		if s == failing {
			body += "\ni=0; while [ $i -lt 200 ]; do echo \"build output line $i\"; i=$((i+1)); done\necho 'the real error' >&2; exit 3"
		}
		stub(t, filepath.Join(tree, "scripts"), s, body)
	}
	stub(t, bin, "go", record+`
case "$1" in
run) echo "`+choice+`" ;;
test) echo "go-test-env LIMITBED_NODE_IMAGE=$LIMITBED_NODE_IMAGE LIMITBED_E2E_PLUGIN_IMAGE=$LIMITBED_E2E_PLUGIN_IMAGE" >>`+calls+` ;;
esac`)
	return tree, bin, calls
}

func runE2E(t *testing.T, tree, bin string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(tree, "scripts", "e2e.sh"))
	cmd.Env = env(bin, "LIMITBED_E2E_CLUSTER=c1", "LIMITBED_NODE_IMAGE=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// index is the position of the first call starting with prefix, or -1.
func index(calls []string, prefix string) int {
	return slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// TestE2EBuildsImagesBeforeTheTest: make e2e builds the node image (when the choice is the offline
// one), the plugin image and the workload image before the kind tier's go test starts, so that no
// deadline of the test covers a build; the test gets the images' names.
func TestE2EBuildsImagesBeforeTheTest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, choice, nodeRef string
		buildsNode            bool
	}{
		{"offline", "offline limitbed/kind-node:v1.37.2-test", "limitbed/kind-node:v1.37.2-test", true},
		{"stock", "use kindest/node:v1.37.0", "kindest/node:v1.37.0", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tree, bin, callsFile := e2eTree(t, tc.choice, "")
			out, err := runE2E(t, tree, bin)
			if err != nil {
				t.Fatalf("e2e.sh: %v\n%s", err, out)
			}
			t.Logf("e2e.sh's output:\n%s", out)
			data, _ := os.ReadFile(callsFile)
			calls := lines(string(data))
			test := index(calls, "go test")
			if test < 0 {
				t.Fatalf("go test never ran; calls:\n%s", data)
			}
			for _, want := range []string{"plugin-image.sh", "workload-image.sh", "go run"} {
				if i := index(calls, want); i < 0 || i > test {
					t.Errorf("%s ran at %d, want before go test (%d); calls:\n%s", want, i, test, data)
				}
			}
			if i := index(calls, "node-image.sh"); tc.buildsNode && (i < 0 || i > test) {
				t.Errorf("node-image.sh ran at %d, want before go test (%d); calls:\n%s", i, test, data)
			} else if !tc.buildsNode && i >= 0 {
				t.Errorf("node-image.sh ran for %q; calls:\n%s", tc.choice, data)
			}
			if !slices.Contains(calls, "plugin-image.sh PLUGIN_IMAGE=limitbed/device-plugin:c1") {
				t.Errorf("the plugin image is not tagged with the cluster's name; calls:\n%s", data)
			}
			want := "go-test-env LIMITBED_NODE_IMAGE=" + tc.nodeRef + " LIMITBED_E2E_PLUGIN_IMAGE=limitbed/device-plugin:c1"
			if !slices.Contains(calls, want) {
				t.Errorf("go test did not get the images' names (%q); calls:\n%s", want, data)
			}
			if !regexp.MustCompile(`(?m)^e2e: +total +\d+ s$`).MatchString(out) {
				t.Errorf("no total for the images' steps:\n%s", out)
			}
		})
	}
}

// TestE2EImageFailureNamesStepAndLog: a failed image build stops make e2e before its test with a
// few lines naming the step and its log, which holds the whole output.
func TestE2EImageFailureNamesStepAndLog(t *testing.T) {
	t.Parallel()
	tree, bin, callsFile := e2eTree(t, "offline limitbed/kind-node:v1.37.2-test", "plugin-image.sh")
	out, err := runE2E(t, tree, bin)
	if err == nil {
		t.Fatalf("e2e.sh succeeded with a failing plugin image build:\n%s", out)
	}
	t.Logf("e2e.sh's output:\n%s", out)
	data, _ := os.ReadFile(callsFile)
	if index(lines(string(data)), "go test") >= 0 {
		t.Errorf("go test ran after a failed image build; calls:\n%s", data)
	}
	if !strings.Contains(out, "FAILED: step [3] plugin image") || !strings.Contains(out, "the real error") {
		t.Errorf("the report does not name the step and show its last lines:\n%s", out)
	}
	if n := strings.Count(out, "build output line"); n > 8 {
		t.Errorf("the report repeats %d lines of the build's output:\n%s", n, out)
	}
	m := regexp.MustCompile(`full log: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the report does not name the log:\n%s", out)
	}
	log, err := os.ReadFile(m[1])
	if err != nil || !strings.Contains(string(log), "build output line 0") || !strings.Contains(string(log), "the real error") {
		t.Errorf("log %s (%v) lacks the step's whole output", m[1], err)
	}
}
