// Package codesize holds the repository to its size limits: no production file over MaxFileLines
// lines and no function over MaxFuncLines lines unless its doc comment says why with a "long:"
// marker. Go functions are found with go/ast; C functions with a small scanner that knows
// comments, strings, character literals and preprocessor lines, enough for the project's C.
package codesize

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
)

// The limits the repository is held to.
const (
	MaxFileLines = 500
	MaxFuncLines = 80
)

// Marker is what a function's doc comment carries, followed by the reason, to be longer than
// MaxFuncLines: "long: one table of every case, read top to bottom".
const Marker = "long:"

// Func is one function definition: its name, first and last line (1-based, inclusive), and
// whether its doc comment gives a reason to be long.
type Func struct {
	Name        string
	Start, End  int
	LongReasons bool
}

// Lines is the function's length, its signature's line and its closing brace's included.
func (f Func) Lines() int { return f.End - f.Start + 1 }

// markerRe: the marker with a reason after it (a bare "long:" says nothing).
var markerRe = regexp.MustCompile(`(?m)\blong:\s*\S`)

// GoFuncs lists the function and method declarations of one Go file.
func GoFuncs(name string, src []byte) ([]Func, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("codesize: parse %s: %w", name, err)
	}
	var out []Func
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		n := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			n = recvName(fd.Recv.List[0].Type) + "." + n
		}
		out = append(out, Func{
			Name:        n,
			Start:       fset.Position(fd.Pos()).Line,
			End:         fset.Position(fd.End()).Line,
			LongReasons: fd.Doc != nil && markerRe.MatchString(fd.Doc.Text()),
		})
	}
	return out, nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// CountLines is the number of lines of src (a last line without a newline counts).
func CountLines(src []byte) int {
	n := strings.Count(string(src), "\n")
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// Offender is one breach of a limit: a file's length or a function's.
type Offender struct {
	Path  string // slash-separated, relative to the repository root
	Func  string // "" for the file itself
	Line  int    // the function's first line; 0 for the file
	Lines int
}

// Key names the offender without its line numbers, which move as the file changes.
func (o Offender) Key() string {
	if o.Func == "" {
		return o.Path
	}
	return o.Path + " " + o.Func
}

func (o Offender) String() string {
	if o.Func == "" {
		return fmt.Sprintf("%s: %d lines, over %d (split it by concern)", o.Path, o.Lines, MaxFileLines)
	}
	return fmt.Sprintf("%s:%d: %s is %d lines, over %d (split it, or say why in its doc comment with %q)",
		o.Path, o.Line, o.Func, o.Lines, MaxFuncLines, Marker+" <reason>")
}

// Check measures one production file (path relative to the root, for the report): its length,
// and every function's, with the Go or the C reader as its name says.
func Check(path string, src []byte) ([]Offender, error) {
	var out []Offender
	if n := CountLines(src); n > MaxFileLines {
		out = append(out, Offender{Path: path, Lines: n})
	}
	read := CFuncs
	if strings.HasSuffix(path, ".go") {
		read = GoFuncs
	}
	fs, err := read(path, src)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		if f.Lines() > MaxFuncLines && !f.LongReasons {
			out = append(out, Offender{Path: path, Func: f.Name, Line: f.Start, Lines: f.Lines()})
		}
	}
	return out, nil
}
