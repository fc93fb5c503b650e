package compare

import (
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

func ck(v schema.Verdict, fig float64, mods ...func(*schema.Check)) schema.Check {
	c := schema.Check{Section: "s", Check: "c", Verdict: v, Figure: schema.Float(fig)}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func bound(lo, hi float64) func(*schema.Check) {
	return func(c *schema.Check) { c.Lo, c.Hi = schema.Float(lo), schema.Float(hi) }
}

func noise(n float64, worse string) func(*schema.Check) {
	return func(c *schema.Check) { c.Noise, c.Worse = schema.Float(n), worse }
}

func TestOne(t *testing.T) {
	cases := []struct {
		name       string
		last, cur  schema.Check
		kind       string // "" = no change
		regression bool
	}{
		{"passed, passes", ck(schema.Pass, 1), ck(schema.Pass, 1), "", false},
		{"a share out of bounds that was in", ck(schema.Pass, 0.30, bound(0.28, 0.32)), ck(schema.Fail, 0.35, bound(0.28, 0.32)), schema.ChangeNowFailing, true},
		{"a skip now failing", ck(schema.Skip, 0), ck(schema.Fail, 0), schema.ChangeNowFailing, true},
		{"still failing", ck(schema.Fail, 0.4), ck(schema.Fail, 0.5), "", false},
		{"fixed", ck(schema.Fail, 0.4), ck(schema.Pass, 0.3), schema.ChangeFixed, false},
		{"now skipped", ck(schema.Pass, 0.4), ck(schema.Skip, 0), schema.ChangeSkipped, false},
		{"an overhead up by more than its bound", ck(schema.Pass, 1, noise(10, "up")), ck(schema.Pass, 12, noise(10, "up")), schema.ChangeWorse, true},
		{"an overhead up within its bound", ck(schema.Pass, 1, noise(10, "up")), ck(schema.Pass, 10, noise(10, "up")), "", false},
		{"an overhead down", ck(schema.Pass, 15, noise(10, "up")), ck(schema.Pass, 1, noise(10, "up")), schema.ChangeBetter, false},
		{"a share moved beyond noise", ck(schema.Pass, 0.28, noise(0.01, "")), ck(schema.Pass, 0.31, noise(0.01, "")), schema.ChangeMoved, false},
		{"no noise, no figure change", ck(schema.Pass, 0.28), ck(schema.Pass, 0.9), "", false},
		{"lower is worse", ck(schema.Pass, 100, noise(5, "down")), ck(schema.Pass, 90, noise(5, "down")), schema.ChangeWorse, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, reg, changed := one(&c.last, &c.cur)
			if (c.kind != "") != changed || ch.Kind != c.kind || reg != c.regression {
				t.Errorf("change %q regression %v changed %v, want %q %v", ch.Kind, reg, changed, c.kind, c.regression)
			}
		})
	}
}

func TestReports(t *testing.T) {
	last := &schema.Report{Run: schema.Run{Card: schema.Card{Name: "NVIDIA H200"}, Sections: []string{"memory", "sched"}},
		Verdict: "pass", Checks: []schema.Check{
			{Section: "memory", Check: "env 4096", Verdict: schema.Pass},
			{Section: "sched", Check: "30+50: pod 30", Verdict: schema.Pass},
			{Section: "memory", Check: "gone", Verdict: schema.Pass},
		}}
	cur := &schema.Report{Run: schema.Run{Card: schema.Card{Name: "NVIDIA H100 80GB HBM3"}, Sections: []string{"memory"}},
		Verdict: "fail", Checks: []schema.Check{
			{Section: "memory", Check: "env 4096", Verdict: schema.Fail, Note: "injected"},
			{Section: "memory", Check: "new one", Verdict: schema.Pass},
		}}
	c := Reports(last, "last.json", cur)
	if len(c.Regressions) != 1 || c.Regressions[0].Check != "env 4096" || c.Regressions[0].Kind != schema.ChangeNowFailing {
		t.Fatalf("regressions %+v", c.Regressions)
	}
	kinds := map[string]string{}
	for _, ch := range c.Changes {
		kinds[ch.Section+"/"+ch.Check] = ch.Kind + ": " + ch.Detail
	}
	want := map[string]string{
		"memory/new one":      schema.ChangeNew,
		"sched/(every check)": schema.ChangeMissing + ": the section was not run this time (1 check(s)",
		"memory/gone":         schema.ChangeMissing + ": not in this report",
	}
	for k, v := range want {
		if !strings.HasPrefix(kinds[k], v) {
			t.Errorf("%s: %q, want %q", k, kinds[k], v)
		}
	}
	if !strings.Contains(c.Note, "another card") {
		t.Errorf("note %q, want one about the other card", c.Note)
	}
	var b strings.Builder
	Text(&b, c)
	if !strings.Contains(b.String(), "REGRESSION now failing  memory/env 4096") {
		t.Errorf("text:\n%s", b.String())
	}
}

func TestBoundAndNum(t *testing.T) {
	for _, c := range []struct {
		c    schema.Check
		want string
	}{
		{schema.Check{Lo: schema.Float(0.28), Hi: schema.Float(0.32), Unit: "share"}, "0.28..0.32 share"},
		{schema.Check{Hi: schema.Float(20), Unit: "µs"}, "≤ 20 µs"},
		{schema.Check{Lo: schema.Float(0.95)}, "≥ 0.95"},
		{schema.Check{Lo: schema.Float(80743.4), Hi: schema.Float(82375.6), Unit: "MiB"}, "80743..82376 MiB"},
		{schema.Check{}, ""},
	} {
		if got := Bound(&c.c); got != c.want {
			t.Errorf("Bound = %q, want %q", got, c.want)
		}
	}
}
