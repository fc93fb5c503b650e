package matrix

import (
	"context"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/launch"
)

type featureBackend struct {
	sandbox.Backend
	features map[sandbox.Feature]bool
}

func (b featureBackend) Name() string                    { return "fake" }
func (b featureBackend) Supports(f sandbox.Feature) bool { return b.features[f] }
func (b featureBackend) Available(context.Context) error { return nil }

func TestUncovered(t *testing.T) {
	lookup := func(names ...string) []launch.Method {
		var ms []launch.Method
		for _, n := range names {
			m, err := launch.Lookup(n)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		return ms
	}
	all := map[sandbox.Feature]bool{sandbox.FeatureSSH: true, sandbox.FeatureCron: true}
	for _, tc := range []struct {
		name     string
		features map[sandbox.Feature]bool
		methods  []launch.Method
		want     string // "" = covered
	}{
		{"every method on a full backend", all, launch.Methods(), ""},
		{"no ssh or cron, all methods", nil, launch.Methods(), "ssh (needs ssh), cron (needs cron)"},
		{"no cron, cron asked", map[sandbox.Feature]bool{sandbox.FeatureSSH: true}, lookup("exec", "cron"), "cron (needs cron)"},
		{"no features, exec-only methods", nil, lookup("exec", "su -", "sudo"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Uncovered(featureBackend{features: tc.features}, tc.methods)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Uncovered = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Uncovered = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
