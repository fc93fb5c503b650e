package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/gpureport/report"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// ShareNoise is how far a share may move between two nights before the comparison calls it a
// change: the bound's own ± 0.02 (compare says "moved"; out of bounds is a failure anyway).
const ShareNoise = 0.02

// computeRecords writes `bench compute`'s outcomes as the GPU tier's records of section (one check
// per limited run, its worst 10 s window against its bound) and one series per workload (every
// run's 1 s ratios beside its limit) into the run directory run (docs/gpu-report.md).
func computeRecords(run, section string, outs []computebench.Outcome) error {
	if err := os.MkdirAll(filepath.Join(run, report.RecordsDir), 0o755); err != nil {
		return err
	}
	var lines []byte
	series := map[string]*schema.Series{}
	var order []string
	for _, o := range outs {
		c := schema.Check{Section: section, Check: "bench compute " + o.Case.String(), Unit: "of unlimited",
			Lo: schema.Float(o.Lo), Hi: schema.Float(o.Hi), Noise: schema.Float(ShareNoise),
			Note: fmt.Sprintf("10 s windows after 2 s: %s; 1 s windows after 2 s: %s", spanOf(o.Long), spanOf(after(o.Ratios)))}
		c.Verdict = schema.Fail
		if w, ok := worst(o); ok {
			c.Figure = schema.Float(w)
		}
		if o.OK {
			c.Verdict = schema.Pass
		}
		if o.Starved {
			c.Note += "; a run was starved of CPU (measure again)"
		}
		l, err := c.Line()
		if err != nil {
			return fmt.Errorf("record of %s: %w", o.Case, err)
		}
		lines = append(lines, l...)
		s := series[o.Case.Workload]
		if s == nil {
			s = &schema.Series{ID: section + "-" + o.Case.Workload, Title: fmt.Sprintf("%s: %s workload, achieved over unlimited per second", section, o.Case.Workload),
				X: "seconds", Y: "share of the unlimited rate"}
			series[o.Case.Workload] = s
			order = append(order, o.Case.Workload)
		}
		ln := schema.Line{Name: fmt.Sprintf("%s %d %%", o.Case.Policy, o.Case.Limit)}
		if o.Case.Policy != "force" {
			ln.Name = o.Case.Policy + " (alone)"
		} else {
			s.Refs = append(s.Refs, schema.Ref{Name: fmt.Sprintf("limit %d %%", o.Case.Limit), Y: float64(o.Case.Limit) / 100})
		}
		for i, r := range o.Ratios {
			ln.Points = append(ln.Points, [2]float64{float64(i + 1), r})
		}
		s.Lines = append(s.Lines, ln)
	}
	if err := appendFile(filepath.Join(run, report.RecordsDir, section+".jsonl"), lines); err != nil {
		return err
	}
	for _, w := range order {
		if err := writeSeries(run, series[w]); err != nil {
			return err
		}
	}
	return nil
}

// worst is the 10 s window farthest from its bound's middle.
func worst(o computebench.Outcome) (float64, bool) {
	if len(o.Long) == 0 {
		return 0, false
	}
	mid, w := (o.Lo+o.Hi)/2, o.Long[0]
	for _, v := range o.Long {
		if math.Abs(v-mid) > math.Abs(w-mid) {
			w = v
		}
	}
	return w, true
}

func after(r []float64) []float64 {
	if len(r) > computebench.SkipWindows {
		return r[computebench.SkipWindows:]
	}
	return nil
}

func spanOf(v []float64) string {
	if len(v) == 0 {
		return "none"
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.3f..%.3f", lo, hi)
}

func writeSeries(run string, s *schema.Series) error {
	var b strings.Builder
	if err := s.WriteCSV(&b); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(run, report.SeriesDir), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(run, report.SeriesDir, s.ID+".csv"), []byte(b.String()), 0o644)
}

func appendFile(path string, b []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.Write(b); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
