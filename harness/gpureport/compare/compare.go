// Package compare says what changed between two GPU reports (an earlier night's and this one's):
// regressions — a check that did not fail and fails now (a share that was within its bounds and
// is out, a fidelity row beyond its bound), a figure that moved beyond its stated noise in the
// direction its record calls worse (an overhead up) — and the other changes beyond noise.
package compare

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// Reports compares last (read from lastFile) with cur.
func Reports(last *schema.Report, lastFile string, cur *schema.Report) *schema.Comparison {
	c := &schema.Comparison{Last: schema.RunRef{File: lastFile, Started: last.Run.Started, Card: last.Run.Card.Name,
		Bundle: last.Run.Bundle, Verdict: last.Verdict}, Regressions: []schema.Change{}, Changes: []schema.Change{}}
	if last.Run.Card.Name != cur.Run.Card.Name {
		c.Note = fmt.Sprintf("the earlier report is of another card (%q, this one %q): figures are compared all the same", last.Run.Card.Name, cur.Run.Card.Name)
	}
	before := map[string]*schema.Check{}
	for i := range last.Checks {
		before[last.Checks[i].ID()] = &last.Checks[i]
	}
	asked := map[string]bool{}
	for _, s := range cur.Run.Sections {
		asked[s] = true
	}
	seen := map[string]bool{}
	for i := range cur.Checks {
		n := &cur.Checks[i]
		seen[n.ID()] = true
		l, ok := before[n.ID()]
		if !ok {
			c.Changes = append(c.Changes, change(schema.ChangeNew, nil, n, "not in the earlier report"))
			continue
		}
		if ch, regression, ok := one(l, n); ok {
			if regression {
				c.Regressions = append(c.Regressions, ch)
			} else {
				c.Changes = append(c.Changes, ch)
			}
		}
	}
	// A section not run this time is one change, however many checks it had.
	notRun, order := map[string]int{}, []string{}
	for i := range last.Checks {
		l := &last.Checks[i]
		if seen[l.ID()] {
			continue
		}
		if len(asked) > 0 && !asked[l.Section] {
			if notRun[l.Section] == 0 {
				order = append(order, l.Section)
			}
			notRun[l.Section]++
			continue
		}
		c.Changes = append(c.Changes, change(schema.ChangeMissing, l, nil, "not in this report"))
	}
	for _, sec := range order {
		c.Changes = append(c.Changes, schema.Change{Kind: schema.ChangeMissing, Section: sec, Check: "(every check)",
			Detail: fmt.Sprintf("the section was not run this time (%d check(s) in the earlier report)", notRun[sec])})
	}
	return c
}

// one compares a check present in both reports: its change, whether it is a regression, and
// whether anything changed at all.
func one(l, n *schema.Check) (schema.Change, bool, bool) {
	switch {
	case n.Verdict == schema.Fail && l.Verdict != schema.Fail:
		why := "failed: " + describe(n)
		if l.Figure != nil && l.InBounds() {
			why = "was within its bound, now out: " + describe(n)
		}
		return change(schema.ChangeNowFailing, l, n, why), true, true
	case l.Verdict == schema.Fail && n.Verdict == schema.Pass:
		return change(schema.ChangeFixed, l, n, "passes now: "+describe(n)), false, true
	case l.Verdict == schema.Pass && n.Verdict == schema.Skip:
		return change(schema.ChangeSkipped, l, n, "skipped: "+n.Note), false, true
	}
	if l.Figure == nil || n.Figure == nil || n.Noise == nil {
		return schema.Change{}, false, false
	}
	d := *n.Figure - *l.Figure
	if math.Abs(d) <= *n.Noise {
		return schema.Change{}, false, false
	}
	why := fmt.Sprintf("%s by %s (noise ± %s)", dir(d), num(math.Abs(d), n.Unit), num(*n.Noise, n.Unit))
	switch {
	case (n.Worse == "up" && d > 0) || (n.Worse == "down" && d < 0):
		return change(schema.ChangeWorse, l, n, why), true, true
	case n.Worse != "":
		return change(schema.ChangeBetter, l, n, why), false, true
	}
	return change(schema.ChangeMoved, l, n, why), false, true
}

func dir(d float64) string {
	if d > 0 {
		return "up"
	}
	return "down"
}

func change(kind string, l, n *schema.Check, detail string) schema.Change {
	c := schema.Change{Kind: kind, Detail: detail}
	for _, x := range []*schema.Check{l, n} {
		if x != nil {
			c.Section, c.Check, c.Unit = x.Section, x.Check, x.Unit
		}
	}
	if l != nil {
		c.LastVerdict, c.Last = l.Verdict, l.Figure
	}
	if n != nil {
		c.NewVerdict, c.New = n.Verdict, n.Figure
	}
	return c
}

// describe is a check's figure against its bound, or what it wanted and got.
func describe(c *schema.Check) string {
	var b strings.Builder
	if c.Figure != nil {
		b.WriteString(num(*c.Figure, c.Unit))
		if c.Lo != nil || c.Hi != nil {
			b.WriteString(", want " + Bound(c))
		}
	} else if c.Want != "" {
		fmt.Fprintf(&b, "want %s", c.Want)
	}
	if c.Note != "" {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Note)
	}
	return b.String()
}

// Bound is a check's bound as the page writes it: "0.28..0.32", "≤ 20 µs", "≥ 0.95".
func Bound(c *schema.Check) string {
	switch {
	case c.Lo != nil && c.Hi != nil:
		return fmt.Sprintf("%s..%s", num(*c.Lo, ""), num(*c.Hi, c.Unit))
	case c.Lo != nil:
		return "≥ " + num(*c.Lo, c.Unit)
	case c.Hi != nil:
		return "≤ " + num(*c.Hi, c.Unit)
	}
	return ""
}

// num writes a figure with 4 significant digits (whole numbers from 1000 on) and its unit.
func num(v float64, unit string) string {
	s := fmt.Sprintf("%.4g", v)
	if math.Abs(v) >= 1000 {
		s = fmt.Sprintf("%.0f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// Num is num for the page's writers.
func Num(v float64, unit string) string { return num(v, unit) }

// Text writes the comparison for a terminal: regressions first, then the other changes.
func Text(w io.Writer, c *schema.Comparison) {
	fmt.Fprintf(w, "compared with %s (%s, %s, %s)\n", c.Last.File, c.Last.Started.Format("2006-01-02 15:04 MST"), c.Last.Card, c.Last.Bundle)
	if c.Note != "" {
		fmt.Fprintf(w, "note: %s\n", c.Note)
	}
	if len(c.Regressions) == 0 {
		fmt.Fprintln(w, "no regression")
	}
	for _, ch := range c.Regressions {
		fmt.Fprintf(w, "REGRESSION %-12s %s: %s\n", ch.Kind, ch.Section+"/"+ch.Check, ch.Detail)
	}
	for _, ch := range c.Changes {
		fmt.Fprintf(w, "changed    %-12s %s: %s\n", ch.Kind, ch.Section+"/"+ch.Check, ch.Detail)
	}
}
