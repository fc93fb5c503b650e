// Package configref reads the configuration reference, docs/configuration.md, so that tests can
// hold it against the code: every flag, config field, annotation, Helm value and library
// variable the code has must be listed there, and nothing the code no longer has.
//
// A reference table is a markdown table preceded by a marker line `<!-- configref:ID -->`; the
// first column of each row is the knob's name in backticks, the other columns are named by the
// table's header (lowercased).
package configref

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DocPath is the reference, relative to the repository root.
const DocPath = "docs/configuration.md"

const markerPrefix, markerSuffix = "<!-- configref:", "-->"

// Row is one knob of a reference table.
type Row struct {
	Name  string            // first column, backticks removed
	Cells map[string]string // by lowercased header, backticks of a whole-cell code span removed
	Line  int               // 1-based line in the document
}

// Table is one marked reference table.
type Table struct {
	ID   string
	Line int
	Rows []Row
}

// Names returns the rows' names in document order.
func (t *Table) Names() []string {
	out := make([]string, len(t.Rows))
	for i, r := range t.Rows {
		out[i] = r.Name
	}
	return out
}

// Row returns the row called name.
func (t *Table) Row(name string) (Row, bool) {
	for _, r := range t.Rows {
		if r.Name == name {
			return r, true
		}
	}
	return Row{}, false
}

// Parse reads every marked table of doc. A marker not followed by a table, a duplicate ID, a
// row whose first cell is not a single code span, or a name listed twice in one table is an
// error naming the line.
func Parse(doc []byte) (map[string]*Table, error) {
	tables := map[string]*Table{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var cur *Table
	var header []string
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if id, ok := marker(line); ok {
			if cur != nil && header == nil {
				return nil, fmt.Errorf("%s:%d: marker %q is not followed by a table", DocPath, cur.Line, cur.ID)
			}
			if id == "" {
				return nil, fmt.Errorf("%s:%d: empty configref marker", DocPath, n)
			}
			if _, dup := tables[id]; dup {
				return nil, fmt.Errorf("%s:%d: configref table %q is marked twice", DocPath, n, id)
			}
			cur, header = &Table{ID: id, Line: n}, nil
			tables[id] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if line == "" && header == nil {
				continue // blank lines between marker and table
			}
			if header == nil {
				return nil, fmt.Errorf("%s:%d: marker %q is not followed by a table", DocPath, cur.Line, cur.ID)
			}
			cur, header = nil, nil // the table ended
			continue
		}
		cells := splitRow(line)
		switch {
		case header == nil:
			header = make([]string, len(cells))
			for i, c := range cells {
				header[i] = strings.ToLower(c)
			}
		case isRule(cells):
		default:
			name, ok := codeSpan(cells[0])
			if !ok || name == "" {
				return nil, fmt.Errorf("%s:%d: table %q: first cell %q is not one `name`", DocPath, n, cur.ID, cells[0])
			}
			if _, dup := cur.Row(name); dup {
				return nil, fmt.Errorf("%s:%d: table %q lists %q twice", DocPath, n, cur.ID, name)
			}
			r := Row{Name: name, Cells: map[string]string{}, Line: n}
			for i := 1; i < len(cells) && i < len(header); i++ {
				v := cells[i]
				if s, ok := codeSpan(v); ok {
					v = s
				}
				r.Cells[header[i]] = v
			}
			cur.Rows = append(cur.Rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", DocPath, err)
	}
	if cur != nil && header == nil {
		return nil, fmt.Errorf("%s:%d: marker %q is not followed by a table", DocPath, cur.Line, cur.ID)
	}
	return tables, nil
}

func marker(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, markerPrefix)
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, markerSuffix)
	return strings.TrimSpace(rest), ok
}

// splitRow splits `| a | b |` into trimmed cells; `\|` stays inside a cell.
func splitRow(line string) []string {
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			b.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" || c == "" {
			return false
		}
	}
	return true
}

// codeSpan returns the content of a cell that is exactly one `code span`.
func codeSpan(c string) (string, bool) {
	if len(c) < 2 || c[0] != '`' || c[len(c)-1] != '`' || strings.Contains(c[1:len(c)-1], "`") {
		return "", false
	}
	return c[1 : len(c)-1], true
}

// Load parses the reference of the repository at root.
func Load(root string) (map[string]*Table, error) {
	b, err := os.ReadFile(filepath.Join(root, DocPath))
	if err != nil {
		return nil, fmt.Errorf("read the configuration reference: %w", err)
	}
	return Parse(b)
}

// Get loads the reference and returns table id.
func Get(root, id string) (*Table, error) {
	tables, err := Load(root)
	if err != nil {
		return nil, err
	}
	t, ok := tables[id]
	if !ok {
		return nil, fmt.Errorf("%s has no table marked %q: add `%s%s %s` before it", DocPath, id, markerPrefix, id, markerSuffix)
	}
	return t, nil
}

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Diff compares the knobs the code has with the rows of t: one problem per knob missing from
// the reference and per row the code no longer has, sorted.
func Diff(t *Table, code []string) []string {
	inCode := map[string]bool{}
	for _, c := range code {
		inCode[c] = true
	}
	var out []string
	for _, c := range code {
		if _, ok := t.Row(c); !ok {
			out = append(out, fmt.Sprintf("%s: table %q does not list %q, which the code has: add a row", DocPath, t.ID, c))
		}
	}
	for _, r := range t.Rows {
		if !inCode[r.Name] {
			out = append(out, fmt.Sprintf("%s:%d: table %q lists %q, which the code no longer has: remove the row", DocPath, r.Line, t.ID, r.Name))
		}
	}
	sort.Strings(out)
	return out
}
