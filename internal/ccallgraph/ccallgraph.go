// Package ccallgraph builds the file-level call graph of a C library from its object files and
// finds the loops in it: file A depends on file B when A's object leaves a symbol undefined that
// B's object defines (a call or a reference to B's data). A loop — a strongly connected component
// of more than one file — means no file of it can be read, changed or tested without the others;
// the project's C libraries have none (see docs/hamicore.md and docs/fakegpu.md).
package ccallgraph

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Graph is the file-level dependency graph: Edges[a][b] names one symbol a takes from b.
type Graph struct {
	Files []string
	Edges map[string]map[string]string
}

// Read builds the graph of the given object files; a file is named by its base name without ".o".
func Read(objects []string) (*Graph, error) {
	if len(objects) == 0 {
		return nil, errors.New("ccallgraph: no object files given (build the library first)")
	}
	g := &Graph{Edges: map[string]map[string]string{}}
	definedBy := map[string]string{}
	undefined := map[string][]string{}
	for _, path := range objects {
		name := strings.TrimSuffix(filepath.Base(path), ".o")
		defs, undefs, err := symbols(path)
		if err != nil {
			return nil, err
		}
		g.Files = append(g.Files, name)
		for _, s := range defs {
			if other, dup := definedBy[s]; dup && other != name {
				return nil, fmt.Errorf("ccallgraph: %s defined by both %s and %s", s, other, name)
			}
			definedBy[s] = name
		}
		undefined[name] = undefs
	}
	sort.Strings(g.Files)
	for _, from := range g.Files {
		for _, s := range undefined[from] {
			to, ok := definedBy[s]
			if !ok || to == from {
				continue // libc, libdl, or a symbol the file also defines
			}
			g.add(from, to, s)
		}
	}
	return g, nil
}

func (g *Graph) add(from, to, symbol string) {
	if g.Edges[from] == nil {
		g.Edges[from] = map[string]string{}
	}
	if old, ok := g.Edges[from][to]; !ok || symbol < old {
		g.Edges[from][to] = symbol // the smallest name: the same report on every run
	}
}

// symbols returns the global symbols an object defines and those it leaves undefined.
func symbols(path string) (defs, undefs []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("ccallgraph: open %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, nil, fmt.Errorf("ccallgraph: symbols of %s: %w", path, err)
	}
	for _, s := range syms {
		bind := elf.ST_BIND(s.Info)
		if s.Name == "" || (bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) {
			continue
		}
		if s.Section == elf.SHN_UNDEF {
			undefs = append(undefs, s.Name)
		} else {
			defs = append(defs, s.Name)
		}
	}
	return defs, undefs, nil
}

// Loops returns every strongly connected component of more than one file, each sorted, in order
// of their first file.
func (g *Graph) Loops() [][]string {
	t := tarjan{g: g, index: map[string]int{}, low: map[string]int{}, on: map[string]bool{}}
	for _, f := range g.Files {
		if _, seen := t.index[f]; !seen {
			t.visit(f)
		}
	}
	sort.Slice(t.loops, func(i, j int) bool { return t.loops[i][0] < t.loops[j][0] })
	return t.loops
}

type tarjan struct {
	g     *Graph
	next  int
	index map[string]int
	low   map[string]int
	stack []string
	on    map[string]bool
	loops [][]string
}

func (t *tarjan) visit(v string) {
	t.index[v], t.low[v] = t.next, t.next
	t.next++
	t.stack = append(t.stack, v)
	t.on[v] = true
	for _, w := range sortedKeys(t.g.Edges[v]) {
		if _, seen := t.index[w]; !seen {
			t.visit(w)
			t.low[v] = min(t.low[v], t.low[w])
		} else if t.on[w] {
			t.low[v] = min(t.low[v], t.index[w])
		}
	}
	if t.low[v] != t.index[v] {
		return
	}
	var comp []string
	for {
		w := t.stack[len(t.stack)-1]
		t.stack = t.stack[:len(t.stack)-1]
		t.on[w] = false
		comp = append(comp, w)
		if w == v {
			break
		}
	}
	if len(comp) > 1 {
		sort.Strings(comp)
		t.loops = append(t.loops, comp)
	}
}

// Describe prints a loop as its edges, each with the symbol that makes it, one per line.
func (g *Graph) Describe(loop []string) string {
	in := map[string]bool{}
	for _, f := range loop {
		in[f] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "loop of %d files: %s\n", len(loop), strings.Join(loop, " "))
	for _, from := range loop {
		for _, to := range sortedKeys(g.Edges[from]) {
			if in[to] {
				fmt.Fprintf(&b, "  %s.c -> %s.c (%s)\n", from, to, g.Edges[from][to])
			}
		}
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
