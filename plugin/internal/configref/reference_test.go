package configref

import (
	"path/filepath"
	"sort"
	"testing"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/libvars"
)

func repoTable(t *testing.T, id string) (string, *Table) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Get(root, id)
	if err != nil {
		t.Fatal(err)
	}
	return root, tab
}

func report(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Error(p)
	}
}

// TestReferenceListsEveryConfigField: every json field of the device config and of the node
// config (by reflection, so a field added to the structs fails here until it is documented).
func TestReferenceListsEveryConfigField(t *testing.T) {
	for _, tc := range []struct {
		id string
		v  any
	}{
		{"config/device", v1.DeviceConfig{}},
		{"config/node", v1.PluginConfig{}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			_, tab := repoTable(t, tc.id)
			fields := JSONFields(tc.v)
			if len(fields) < 5 {
				t.Fatalf("reflection found only %v", fields)
			}
			report(t, Diff(tab, fields))
		})
	}
}

// TestReferenceListsEveryAnnotation: every hami.io/ key the repository's Go code spells.
func TestReferenceListsEveryAnnotation(t *testing.T) {
	root, tab := repoTable(t, "annotations")
	keys, err := GoStringLiterals(root, ".", "hami.io/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no hami.io/ literal found in the code: the scan is broken")
	}
	report(t, Diff(tab, keys))
}

// TestReferenceListsEveryHelmValue: every leaf of the chart's values.yaml, with its default.
func TestReferenceListsEveryHelmValue(t *testing.T) {
	root, tab := repoTable(t, "helm")
	vals, err := HelmValues(filepath.Join(root, "deployments", "helm", "limitbed", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	report(t, Diff(tab, names))
	for _, k := range names {
		if r, ok := tab.Row(k); ok && r.Cells["default"] != vals[k] {
			t.Errorf("%s:%d: %s: default %q, values.yaml says %q", DocPath, r.Line, k, r.Cells["default"], vals[k])
		}
	}
}

// TestReferenceListsEveryLibraryVariable: every variable the library reads (plugin/libvars,
// which its own test holds to the C table).
func TestReferenceListsEveryLibraryVariable(t *testing.T) {
	_, tab := repoTable(t, "library")
	report(t, Diff(tab, libvars.Patterns()))
}
