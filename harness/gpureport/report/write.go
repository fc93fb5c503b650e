package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/limitbed/limitbed/harness/gpureport/compare"
	"github.com/limitbed/limitbed/harness/gpureport/plot"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// Options are what Make does beyond the run directory.
type Options struct {
	Previous string // an earlier report.json to compare with ("" for none)
	Logger   *slog.Logger
}

// Make builds the report of the run directory and writes report.json, report.md and the plots
// into it. It returns the report (with its comparison when Previous is set).
func Make(dir string, o Options) (*schema.Report, error) {
	r, err := Build(dir, o.Logger)
	if err != nil {
		return nil, err
	}
	if o.Previous != "" {
		b, err := os.ReadFile(o.Previous)
		if err != nil {
			return nil, fmt.Errorf("the earlier report: %w (give the report.json of an earlier run)", err)
		}
		last, err := schema.ReadReport(b, o.Previous)
		if err != nil {
			return nil, err
		}
		r.Comparison = compare.Reports(last, o.Previous, r)
	}
	r.Plots = drawAll(dir, o.Logger)
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, JSONFile), append(js, '\n')); err != nil {
		return nil, err
	}
	var page bytes.Buffer
	Markdown(&page, r)
	if err := writeFile(filepath.Join(dir, PageFile), page.Bytes()); err != nil {
		return nil, err
	}
	return r, nil
}

// drawAll draws every series/*.csv into plots/ID.svg; a series that cannot be read or drawn is
// listed with its error.
func drawAll(dir string, logger *slog.Logger) []schema.Plot {
	files, _ := filepath.Glob(filepath.Join(dir, SeriesDir, "*.csv"))
	sort.Strings(files)
	out := []schema.Plot{}
	for _, p := range files {
		id := strings.TrimSuffix(filepath.Base(p), ".csv")
		pl := schema.Plot{ID: id, Title: id, Series: filepath.Join(SeriesDir, filepath.Base(p)), File: filepath.Join(PlotsDir, id+".svg")}
		if err := draw(dir, p, &pl); err != nil {
			pl.Error, pl.File = err.Error(), ""
			logger.Warn("a series was not drawn", "series", pl.Series, "err", err)
		}
		out = append(out, pl)
	}
	return out
}

func draw(dir, path string, pl *schema.Plot) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	s, err := schema.ParseSeries(f, pl.ID, pl.Series)
	f.Close()
	if err != nil {
		return err
	}
	pl.Title = s.Title
	var img bytes.Buffer
	if err := plot.SVG(s, &img); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, PlotsDir), 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, pl.File), img.Bytes())
}

// writeFile replaces path atomically (a reader never sees half a report).
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
