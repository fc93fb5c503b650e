// Package plot draws a GPU-tier series (a pod's share per second, a process's memory per step)
// as an SVG line plot with gonum/plot: one line per named line of the series, its reference lines
// (limits) dashed, a legend.
package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// Size of a drawn plot.
const (
	Width  = 8 * vg.Inch
	Height = 4 * vg.Inch
)

// SVG draws the series to w.
func SVG(s *schema.Series, w io.Writer) error {
	p, err := build(s)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(Width, Height, "svg")
	if err != nil {
		return fmt.Errorf("plot %s: %w", s.ID, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("plot %s: %w", s.ID, err)
	}
	return nil
}

func build(s *schema.Series) (*plot.Plot, error) {
	if s.Points() == 0 && len(s.Lines) == 0 {
		return nil, fmt.Errorf("plot %s: the series has no point", s.ID)
	}
	p := plot.New()
	p.Title.Text = s.Title
	p.X.Label.Text = s.X
	p.Y.Label.Text = s.Y
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, l := range s.Lines {
		xys := make(plotter.XYs, len(l.Points))
		for j, pt := range l.Points {
			xys[j].X, xys[j].Y = pt[0], pt[1]
			xmin, xmax = math.Min(xmin, pt[0]), math.Max(xmax, pt[0])
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plot %s, line %q: %w", s.ID, l.Name, err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Color = plotutil.Color(i)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(l.Name, line)
	}
	if xmin > xmax {
		xmin, xmax = 0, 1
	}
	ymax := 0.0
	for _, l := range s.Lines {
		for _, pt := range l.Points {
			ymax = math.Max(ymax, pt[1])
		}
	}
	for _, r := range s.Refs {
		ref, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: r.Y}, {X: xmax, Y: r.Y}})
		if err != nil {
			return nil, fmt.Errorf("plot %s, reference %q: %w", s.ID, r.Name, err)
		}
		ymax = math.Max(ymax, r.Y)
		ref.Color = refColor(s.Lines, r.Name)
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		ref.Width = vg.Points(1)
		p.Add(ref)
		p.Legend.Add(r.Name, ref)
	}
	// From 0 (shares and MiB are read against it), with room above the data for the legend.
	p.Y.Min = math.Min(0, p.Y.Min)
	if ymax > 0 {
		p.Y.Max = math.Max(p.Y.Max, ymax*(1.15+0.06*float64(len(s.Lines)+len(s.Refs))))
	}
	return p, nil
}

// refColor is the colour of the line a reference belongs to ("limit pod 30 %" is pod 30 %'s),
// else grey.
func refColor(lines []schema.Line, ref string) color.Color {
	for i, l := range lines {
		if strings.Contains(ref, l.Name) {
			return plotutil.Color(i)
		}
	}
	return color.Gray{Y: 0x60}
}
