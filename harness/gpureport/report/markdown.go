package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/limitbed/limitbed/harness/gpureport/compare"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// FidelitySection is the section whose records are the fidelity table (card against fakegpu).
const FidelitySection = "fidelity"

// Markdown writes the page: the card, the failures first, the comparison, the sections, the
// fidelity table, the plots, then every check by section.
func Markdown(w io.Writer, r *schema.Report) {
	title := "PASS"
	if r.Verdict != "pass" {
		title = "FAIL"
	}
	fmt.Fprintf(w, "# GPU check: %s — %d of %d checks failed, %d skipped\n\n", title, r.Counts.Fail, r.Counts.Total(), r.Counts.Skip)
	header(w, r)
	failures(w, r.Checks)
	comparison(w, r.Comparison)
	sections(w, r)
	fidelity(w, r)
	plots(w, r.Plots)
	every(w, r)
}

func header(w io.Writer, r *schema.Report) {
	c := r.Run.Card
	fmt.Fprintln(w, "| | |\n|---|---|")
	card := fmt.Sprintf("%s (%s), %d GPU(s) on the machine", cell(c.Name), cell(c.UUID), c.GPUs)
	if c.FakeGPU {
		card += " — **fakegpu, not a card** (the tier's self-test)"
	}
	row(w, "card", card)
	row(w, "memory, SMs", fmt.Sprintf("%.0f MiB, %d SMs, compute capability %s", c.MemoryMiB, c.SMs, cell(c.CC)))
	toolkit := c.Toolkit
	if toolkit == "" {
		toolkit = "none (no nvcc)"
	}
	row(w, "driver, CUDA", fmt.Sprintf("driver %s, CUDA %s; toolkit %s", cell(c.Driver), cell(c.CUDA), cell(toolkit)))
	row(w, "clocks", clocks(c))
	prof := c.Profile
	if prof == "" {
		prof = "none matches this card (harness/gpu/cards.tsv)"
	}
	row(w, "fakegpu profile", cell(prof))
	row(w, "run", fmt.Sprintf("%s, %s; host %s", r.Run.Started.UTC().Format("2006-01-02 15:04 MST"),
		duration(r.Finished.Sub(r.Run.Started)), cell(r.Run.Host)))
	row(w, "bundle", cell(r.Run.Bundle))
	row(w, "command", "`"+strings.ReplaceAll(r.Run.Command, "`", "'")+"`")
	fmt.Fprintln(w)
	for _, n := range r.Run.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(r.Run.Notes) > 0 {
		fmt.Fprintln(w)
	}
}

func clocks(c schema.Card) string {
	s := fmt.Sprintf("SM %d MHz at the start", c.ClockSM)
	if c.ClockSMMax > 0 {
		s += fmt.Sprintf(" (max %d MHz)", c.ClockSMMax)
	}
	s += fmt.Sprintf(", memory %d MHz", c.ClockMem)
	if c.PowerLimitW > 0 {
		s += fmt.Sprintf(", power limit %.0f W", c.PowerLimitW)
	}
	return s
}

func failures(w io.Writer, checks []schema.Check) {
	fmt.Fprintln(w, "## Failures")
	fmt.Fprintln(w)
	n := 0
	for i := range checks {
		if checks[i].Verdict == schema.Fail {
			if n == 0 {
				fmt.Fprintln(w, "| section | check | figure | bound | detail |\n|---|---|---|---|---|")
			}
			c := &checks[i]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", c.Section, c.Check, figure(c), cell(compare.Bound(c)), detail(c))
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "None.")
	}
	fmt.Fprintln(w)
	skipped := 0
	for i := range checks {
		if checks[i].Verdict == schema.Skip {
			if skipped == 0 {
				fmt.Fprintln(w, "Skipped here, and why:\n\n| section | check | why |\n|---|---|---|")
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", checks[i].Section, checks[i].Check, cell(checks[i].Note))
			skipped++
		}
	}
	if skipped > 0 {
		fmt.Fprintln(w)
	}
}

func comparison(w io.Writer, c *schema.Comparison) {
	fmt.Fprintln(w, "## Compared with an earlier run")
	fmt.Fprintln(w)
	if c == nil {
		fmt.Fprintln(w, "Not compared: no earlier report was given (`./gpu-check --previous LAST/report.json`, or `limitbed gpu compare LAST.json NEW.json`).")
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "With `%s`: %s, %s, bundle %s, verdict %s.\n\n", cell(c.Last.File), c.Last.Started.UTC().Format("2006-01-02 15:04 MST"),
		cell(c.Last.Card), cell(c.Last.Bundle), c.Last.Verdict)
	if c.Note != "" {
		fmt.Fprintf(w, "Note: %s\n\n", cell(c.Note))
	}
	if len(c.Regressions) == 0 {
		fmt.Fprintln(w, "No regression.")
		fmt.Fprintln(w)
	}
	if len(c.Regressions)+len(c.Changes) == 0 {
		fmt.Fprintln(w, "Nothing changed beyond its noise.")
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "| | change | section | check | before | now | detail |\n|---|---|---|---|---|---|---|")
	for _, set := range []struct {
		tag string
		chs []schema.Change
	}{{"**regression**", c.Regressions}, {"", c.Changes}} {
		for _, ch := range set.chs {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", set.tag, ch.Kind, ch.Section, ch.Check,
				was(ch.LastVerdict, ch.Last, ch.Unit), was(ch.NewVerdict, ch.New, ch.Unit), cell(ch.Detail))
		}
	}
	fmt.Fprintln(w)
}

func was(v schema.Verdict, f *float64, unit string) string {
	s := string(v)
	if f != nil {
		s += " " + compare.Num(*f, unit)
	}
	return strings.TrimSpace(s)
}

func sections(w io.Writer, r *schema.Report) {
	fmt.Fprintln(w, "## Sections")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| section | status | pass | fail | skip | figures | time | log |\n|---|---|---|---|---|---|---|---|")
	for _, s := range r.Sections {
		c := schema.Counts{}
		if s.Counts != nil {
			c = *s.Counts
		}
		st := s.Status
		if st != schema.StatusPass {
			st = "**" + st + "**"
		}
		log := ""
		if s.Log != "" {
			log = fmt.Sprintf("[%s](%s)", s.Log, s.Log)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %s | %s |\n", s.Name, st, c.Pass, c.Fail, c.Skip, c.Info,
			duration(time.Duration(s.Seconds*float64(time.Second))), log)
	}
	fmt.Fprintln(w)
}

func fidelity(w io.Writer, r *schema.Report) {
	var rows []*schema.Check
	for i := range r.Checks {
		if r.Checks[i].Section == FidelitySection {
			rows = append(rows, &r.Checks[i])
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Fidelity: the card against fakegpu (profile %s)\n\n", cell(r.Run.Card.Profile))
	fmt.Fprintln(w, "The same probe on the card and on fakegpu with the card's profile; a row beyond its bound fails the run and names what to fix.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| verdict | probe | card | fakegpu | bound (card) | fix | detail |\n|---|---|---|---|---|---|---|")
	for _, c := range rows {
		fake := ""
		if c.Fake != nil {
			fake = compare.Num(*c.Fake, c.Unit)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", verdict(c.Verdict), c.Check, figure(c), fake,
			cell(compare.Bound(c)), cell(c.Key), detail(c))
	}
	fmt.Fprintln(w)
}

func plots(w io.Writer, ps []schema.Plot) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w, "## Plots")
	fmt.Fprintln(w)
	for _, p := range ps {
		fmt.Fprintf(w, "### %s\n\n", cell(p.Title))
		if p.Error != "" {
			fmt.Fprintf(w, "Not drawn: %s (data: [%s](%s)).\n\n", cell(p.Error), p.Series, p.Series)
			continue
		}
		fmt.Fprintf(w, "![%s](%s)\n\ndata: [%s](%s)\n\n", cell(p.Title), p.File, p.Series, p.Series)
	}
}

func every(w io.Writer, r *schema.Report) {
	fmt.Fprintln(w, "## Every check")
	for _, s := range r.Sections {
		fmt.Fprintf(w, "\n### %s\n\n", s.Name)
		fmt.Fprintln(w, "| verdict | check | figure | bound | detail |\n|---|---|---|---|---|")
		for i := range r.Checks {
			if c := &r.Checks[i]; c.Section == s.Name {
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", verdict(c.Verdict), c.Check, figure(c), cell(compare.Bound(c)), detail(c))
			}
		}
	}
}

func row(w io.Writer, k, v string) { fmt.Fprintf(w, "| %s | %s |\n", k, v) }

func verdict(v schema.Verdict) string {
	if v == schema.Fail {
		return "**FAIL**"
	}
	return strings.ToUpper(string(v))
}

func figure(c *schema.Check) string {
	if c.Figure == nil {
		return ""
	}
	return compare.Num(*c.Figure, c.Unit)
}

// detail is what the check wanted and saw, and its note.
func detail(c *schema.Check) string {
	var parts []string
	if c.Want != "" {
		parts = append(parts, "want "+c.Want)
	}
	if c.Got != "" {
		got := c.Got
		if r := []rune(got); c.Verdict != schema.Fail && len(r) > 160 {
			got = string(r[:157]) + "..." // a failure shows what it saw; a pass only a glimpse
		}
		parts = append(parts, "got "+got)
	}
	if c.Note != "" {
		parts = append(parts, c.Note)
	}
	return cell(strings.Join(parts, "; "))
}

// cell makes text safe in a table cell: one line, pipes escaped, at most 400 characters.
func cell(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ", "|", "\\|").Replace(s)
	if r := []rune(s); len(r) > 400 {
		s = string(r[:397]) + "..."
	}
	return s
}

func duration(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()))
	}
	return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
}
