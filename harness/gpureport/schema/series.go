package schema

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Series is what one plot shows: named lines of (x, y) points and horizontal reference lines (a
// limit). Its file (series/ID.csv) is written by a section as it measures, one point a line:
//
//	# title: sched 30+50: each pod's share per second
//	# x: seconds
//	# y: share of the workload's unlimited rate
//	# ref limit pod 30: 0.30
//	x,line,y
//	1,pod 30,0.291
//
// Comment lines before the header carry the title, the axes' labels and the references; data
// lines after it are "x,line,y" (line names hold no comma), in any order, appended by any writer.
type Series struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	X      string `json:"x"`
	Y      string `json:"y"`
	Refs   []Ref  `json:"refs,omitempty"`
	Lines  []Line `json:"lines"`
	points int    // how many points the lines hold
}

// Ref is a horizontal line of a plot: a limit, a bound.
type Ref struct {
	Name string  `json:"name"`
	Y    float64 `json:"y"`
}

// Line is one named line of points, in the order they were read.
type Line struct {
	Name   string       `json:"name"`
	Points [][2]float64 `json:"points"`
}

// Points is how many points the series holds.
func (s *Series) Points() int { return s.points }

// MaxSeriesPoints bounds one series file: a plot of more is not read by a person.
const MaxSeriesPoints = 100000

// SeriesIDRe is what a series' ID (its file name without .csv) may be.
var SeriesIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// ParseSeries reads a series file; id is its name without ".csv", what names it in errors.
func ParseSeries(r io.Reader, id, what string) (*Series, error) {
	if !SeriesIDRe.MatchString(id) {
		return nil, fmt.Errorf("%s: series name %q: want lower-case letters, digits, '.', '_' and '-' (a file name)", what, id)
	}
	s := &Series{ID: id}
	idx := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	header := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		var err error
		switch {
		case line == "":
		case !header && strings.HasPrefix(line, "#"):
			err = s.meta(strings.TrimSpace(line[1:]))
		case !header:
			if line != "x,line,y" {
				err = fmt.Errorf("header %q: want \"x,line,y\" after the # lines", line)
			}
			header = true
		default:
			err = s.point(line, idx)
		}
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", what, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if s.Title == "" {
		return nil, fmt.Errorf("%s: no \"# title: ...\" line", what)
	}
	return s, nil
}

// meta reads one "# key: value" line before the header.
func (s *Series) meta(body string) error {
	key, val, ok := strings.Cut(body, ":")
	if !ok {
		return nil // a plain comment
	}
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	switch {
	case key == "title":
		s.Title = val
	case key == "x":
		s.X = val
	case key == "y":
		s.Y = val
	case strings.HasPrefix(key, "ref "):
		y, err := number(val)
		if err != nil {
			return fmt.Errorf("reference %q: %w", key, err)
		}
		if len(s.Refs) >= 32 {
			return fmt.Errorf("more than 32 reference lines")
		}
		s.Refs = append(s.Refs, Ref{Name: strings.TrimSpace(strings.TrimPrefix(key, "ref ")), Y: y})
	}
	if len(val) > MaxName {
		return fmt.Errorf("%q: %d bytes, at most %d", key, len(val), MaxName)
	}
	return nil
}

func (s *Series) point(line string, idx map[string]int) error {
	f := strings.Split(line, ",")
	if len(f) != 3 {
		return fmt.Errorf("%q: want x,line,y (three fields)", line)
	}
	x, err := number(f[0])
	if err != nil {
		return fmt.Errorf("x: %w", err)
	}
	y, err := number(f[2])
	if err != nil {
		return fmt.Errorf("y: %w", err)
	}
	n := strings.TrimSpace(f[1])
	if err := name("line", n); err != nil {
		return err
	}
	if s.points >= MaxSeriesPoints {
		return fmt.Errorf("more than %d points", MaxSeriesPoints)
	}
	i, ok := idx[n]
	if !ok {
		if len(s.Lines) >= 64 {
			return fmt.Errorf("line %q: more than 64 lines in one plot", n)
		}
		i = len(s.Lines)
		idx[n] = i
		s.Lines = append(s.Lines, Line{Name: n})
	}
	s.Lines[i].Points = append(s.Lines[i].Points, [2]float64{x, y})
	s.points++
	return nil
}

func number(v string) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%q is not a finite number", v)
	}
	return x, nil
}

// WriteCSV writes the series in its file's format (ParseSeries reads it back).
func (s *Series) WriteCSV(w io.Writer) error {
	if !SeriesIDRe.MatchString(s.ID) {
		return fmt.Errorf("series name %q: want lower-case letters, digits, '.', '_' and '-'", s.ID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# title: %s\n# x: %s\n# y: %s\n", oneLine(s.Title), oneLine(s.X), oneLine(s.Y))
	for _, r := range s.Refs {
		fmt.Fprintf(&b, "# ref %s: %s\n", strings.ReplaceAll(oneLine(r.Name), ":", " "), strconv.FormatFloat(r.Y, 'g', -1, 64))
	}
	b.WriteString("x,line,y\n")
	for _, l := range s.Lines {
		if err := name("line", l.Name); err != nil || strings.Contains(l.Name, ",") {
			return fmt.Errorf("series %s: line %q: a name without newline, tab, | or comma", s.ID, l.Name)
		}
		for _, p := range l.Points {
			fmt.Fprintf(&b, "%s,%s,%s\n", strconv.FormatFloat(p[0], 'g', -1, 64), l.Name, strconv.FormatFloat(p[1], 'g', -1, 64))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
