package matrix

import (
	"strings"
	"testing"
)

// TestMarkdown: a matching cell shows its verdict, a mismatch is bold with ✗ and listed with its
// failed checks, an unsupported method shows a dash.
func TestMarkdown(t *testing.T) {
	t.Parallel()
	c := Combo{"current", "current", "file"}
	rep := Report{Backend: "docker", Methods: []string{"exec", "ssh", "cron"}, Combos: []Combo{c}, Mismatch: 1, Skipped: 1,
		Results: []Result{
			{Combo: c, Method: "exec", KeepsEnv: true, Expected: true, Enforced: true, Match: true},
			{Combo: c, Method: "ssh", Expected: true, Observed: Observation{HolderPID: 9, GrantedMiB: 4096}, Why: []string{"refused? no"}},
			{Combo: c, Method: "cron", Unsupported: "no cron", Match: true},
		}}
	md := Markdown(rep)
	for _, want := range []string{
		"| `exec` | yes | capped |",
		"| `ssh` | no | **escapes ✗** |",
		"| `cron` | no | — |",
		"- current / current / file, ssh: want capped: refused? no",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestMarkdownPluginOld: with an old plugin binary, the v2.10 plugin columns name the binary and the
// summary line gives its argument template; the other columns keep their labels.
func TestMarkdownPluginOld(t *testing.T) {
	t.Parallel()
	old, cur := Combo{"hami-v2.10", "current", "env"}, Combo{"current", "current", "env"}
	rep := Report{Backend: "docker", Methods: []string{"exec"}, Combos: []Combo{old, cur},
		PluginOld: "/opt/old/vgpu-device-plugin --compat-profile=hami-v2.10",
		Results: []Result{
			{Combo: old, Method: "exec", KeepsEnv: true, Expected: true, Enforced: true, Match: true},
			{Combo: cur, Method: "exec", KeepsEnv: true, Expected: true, Enforced: true, Match: true},
		}}
	md := Markdown(rep)
	for _, want := range []string{
		"old plugin: `/opt/old/vgpu-device-plugin --compat-profile=hami-v2.10`",
		"| method | env kept | v2.10=`vgpu-device-plugin` binary / current / env | current / current / env |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
