package matrix

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/limitbed/limitbed/harness/matrix/node"
)

func progressLine(res Result) string {
	head := fmt.Sprintf("%-42s %-10s", res.Combo.String(), res.Method)
	switch {
	case res.Unsupported != "":
		return head + " skipped: " + res.Unsupported
	case res.Match:
		return head + " " + verdict(res.Enforced) + " as expected"
	default:
		return head + " MISMATCH: want " + verdict(res.Expected) + ": " + strings.Join(res.Why, "; ")
	}
}

func verdict(enforced bool) string {
	if enforced {
		return "capped"
	}
	return "escapes"
}

func sortResults(rs []Result, combos []Combo, methods []string) {
	ci := func(c Combo) int { return slices.Index(combos, c) }
	slices.SortStableFunc(rs, func(a, b Result) int {
		if d := ci(a.Combo) - ci(b.Combo); d != 0 {
			return d
		}
		return slices.Index(methods, a.Method) - slices.Index(methods, b.Method)
	})
}

// smiMissing counts the cells that ran without nvidia-smi.
func smiMissing(rep Report) int {
	n := 0
	for _, r := range rep.Results {
		if r.Observed.SMIMissing {
			n++
		}
	}
	return n
}

// Markdown renders the report: one row per launch method, one column per combination; a cell reads
// "capped" or "escapes", bold with ✗ where it differs from the design, "—" where the backend cannot
// run the method. Mismatches are listed below with the failing checks.
func Markdown(rep Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Compatibility matrix\n\nbackend: %s, %d cells, %d mismatches, %d skipped, %.0f s",
		rep.Backend, len(rep.Results), rep.Mismatch, rep.Skipped, rep.Elapsed.Seconds())
	if rep.CoreOld != "" {
		fmt.Fprintf(&b, "; old core: %s", rep.CoreOld)
	}
	if rep.CoreLink == node.LinkNoAsNeeded {
		fmt.Fprintf(&b, "; every core as if linked -Wl,--no-as-needed (%s preloaded after it)", node.DriverDouble)
	}
	if rep.PluginOld != "" {
		fmt.Fprintf(&b, "; old plugin: `%s`", rep.PluginOld)
	}
	if n := smiMissing(rep); n > 0 {
		fmt.Fprintf(&b, "; nvidia-smi's check skipped in %d cells: not in the workload image (scripts/nvidia-smi.sh gets Debian's)", n)
	} else {
		b.WriteString("; nvidia-smi checked in every cell")
	}
	b.WriteString("\n\nColumns: plugin / core / limitDelivery. A cell is capped when a 4096 MiB allocation under a " +
		"3000 MiB limit is refused, gpuinfo and the real nvidia-smi show 3000 MiB and the process is in the pod's usage.cache.\n\n")
	cell := func(method string, c Combo) string {
		for _, r := range rep.Results {
			if r.Combo != c || r.Method != method {
				continue
			}
			switch {
			case r.Unsupported != "":
				return "—"
			case r.Match:
				return verdict(r.Enforced)
			case len(r.Observed.Error) == 0 && r.Observed.HolderPID == 0:
				return "**error ✗**"
			default:
				return "**" + verdict(r.Enforced) + " ✗**"
			}
		}
		return ""
	}
	writeTable(&b, rep.Methods, rep.Combos, keepsEnvOf(rep.Results), rep.label, cell)
	if rep.Mismatch > 0 {
		b.WriteString("\n## Mismatches\n\n")
		for _, r := range rep.Results {
			if !r.Match {
				fmt.Fprintf(&b, "- %s, %s: want %s: %s\n", rep.label(r.Combo), r.Method, verdict(r.Expected), strings.Join(r.Why, "; "))
			}
		}
	}
	return b.String()
}

// ExpectedMarkdown renders expected.json the same way, with the reasons.
func ExpectedMarkdown(e Expected) string {
	var methods []string
	var combos []Combo
	keeps := map[string]bool{}
	whys := map[string]bool{}
	var whyList []string
	for _, x := range e.Cells {
		if !slices.Contains(methods, x.Method) {
			methods = append(methods, x.Method)
		}
		if !slices.Contains(combos, x.Combo) {
			combos = append(combos, x.Combo)
		}
		keeps[x.Method] = x.KeepsEnv
		if !whys[x.Why] {
			whys[x.Why] = true
			whyList = append(whyList, x.Why)
		}
	}
	var b strings.Builder
	b.WriteString("# Expected compatibility matrix\n\nGenerated from expected.json (derived from the design's " +
		"Compatibility and Failure behavior sections). Columns: plugin / core / limitDelivery; the number " +
		"after a verdict is the reason below.\n\n")
	writeTable(&b, methods, combos, keeps, Combo.Label, func(m string, c Combo) string {
		x, _ := e.Lookup(c, m)
		return fmt.Sprintf("%s (%d)", verdict(x.Enforced), slices.Index(whyList, x.Why)+1)
	})
	b.WriteString("\n")
	for i, w := range whyList {
		fmt.Fprintf(&b, "%d. %s\n", i+1, w)
	}
	return b.String()
}

func keepsEnvOf(rs []Result) map[string]bool {
	m := map[string]bool{}
	for _, r := range rs {
		m[r.Method] = r.KeepsEnv
	}
	return m
}

// label is a column heading: Combo.Label, with the old plugin binary's name in place of the
// hami-v2.10 profile when one replaced it.
func (rep Report) label(c Combo) string {
	if rep.PluginOld == "" || c.Plugin != "hami-v2.10" {
		return c.Label()
	}
	bin, _, _ := strings.Cut(rep.PluginOld, " ")
	return "v2.10=`" + filepath.Base(bin) + "` binary / " + short(c.Core) + " / " + c.Delivery
}

func writeTable(b *strings.Builder, methods []string, combos []Combo, keeps map[string]bool, label func(Combo) string,
	cell func(string, Combo) string) {
	b.WriteString("| method | env kept |")
	for _, c := range combos {
		b.WriteString(" " + label(c) + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(combos)) + "\n")
	for _, m := range methods {
		kept := "no"
		if keeps[m] {
			kept = "yes"
		}
		fmt.Fprintf(b, "| `%s` | %s |", m, kept)
		for _, c := range combos {
			b.WriteString(" " + cell(m, c) + " |")
		}
		b.WriteString("\n")
	}
}

// JSON renders the report as matrix.json.
func JSON(rep Report) ([]byte, error) {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render matrix.json: %w", err)
	}
	return append(data, '\n'), nil
}
