package codesize

import (
	"fmt"
	"strings"
)

// comment is one comment of a C file, with the lines it spans.
type comment struct {
	start, end int
	text       string
}

// cscanner walks a C file's code: comments and preprocessor lines are collected or dropped,
// strings and character literals skipped, so braces and parentheses are the code's own.
type cscanner struct {
	src      []byte
	i, line  int
	comments []comment
	bol      bool // only blanks so far on this line: a '#' here starts a preprocessor line
}

// next returns the next code byte and its line, or ok false at the end.
func (s *cscanner) next() (c byte, line int, ok bool) {
	for s.i < len(s.src) {
		c, line = s.src[s.i], s.line
		switch {
		case c == '\n':
			s.i++
			s.line++
			s.bol = true
			return ' ', line, true
		case c == '/' && s.peek(1) == '/':
			s.lineComment()
		case c == '/' && s.peek(1) == '*':
			s.blockComment()
		case c == '#' && s.bol:
			s.preprocessor()
		case c == '"' || c == '\'':
			s.literal(c)
			s.bol = false
			return 'x', line, true
		default:
			s.i++
			if c != ' ' && c != '\t' && c != '\r' && c != '\f' {
				s.bol = false
			}
			return c, line, true
		}
	}
	return 0, s.line, false
}

func (s *cscanner) peek(k int) byte {
	if s.i+k < len(s.src) {
		return s.src[s.i+k]
	}
	return 0
}

func (s *cscanner) lineComment() {
	start, from := s.line, s.i
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		s.i++
	}
	s.comments = append(s.comments, comment{start, start, string(s.src[from:s.i])})
}

func (s *cscanner) blockComment() {
	start, from := s.line, s.i
	s.i += 2
	for s.i < len(s.src) && !(s.src[s.i] == '*' && s.peek(1) == '/') {
		if s.src[s.i] == '\n' {
			s.line++
		}
		s.i++
	}
	s.i = min(s.i+2, len(s.src))
	s.comments = append(s.comments, comment{start, s.line, string(s.src[from:s.i])})
}

// preprocessor skips a directive up to its unescaped newline (comments in it are still comments).
func (s *cscanner) preprocessor() {
	for s.i < len(s.src) && s.src[s.i] != '\n' {
		switch {
		case s.src[s.i] == '\\' && s.peek(1) == '\n':
			s.i += 2
			s.line++
		case s.src[s.i] == '/' && s.peek(1) == '*':
			s.blockComment()
		case s.src[s.i] == '/' && s.peek(1) == '/':
			s.lineComment()
		default:
			s.i++
		}
	}
}

// literal skips a string or character literal, escapes included.
func (s *cscanner) literal(q byte) {
	s.i++
	for s.i < len(s.src) && s.src[s.i] != q && s.src[s.i] != '\n' {
		if s.src[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	s.i++
}

// CFuncs lists the function definitions of one C file: a top-level brace whose declaration so
// far has parentheses, no '=' and ends in ')'. Its lines run from the declaration's first line
// (the return type) to the closing brace; its doc comment is the comment ending just above.
func CFuncs(name string, src []byte) ([]Func, error) {
	s := &cscanner{src: src, line: 1, bol: true}
	var out []Func
	var decl strings.Builder
	depth, declStart := 0, 0
	var cur *Func
	for {
		c, line, ok := s.next()
		if !ok {
			break
		}
		if depth > 0 {
			depth += braceDelta(c)
			if depth == 0 && cur != nil {
				cur.End = line
				out = append(out, *cur)
				cur = nil
			}
			if depth < 0 {
				return nil, fmt.Errorf("codesize: %s:%d: unbalanced '}'", name, line)
			}
			continue
		}
		switch c {
		case '}':
			return nil, fmt.Errorf("codesize: %s:%d: unbalanced '}'", name, line)
		case ';':
			decl.Reset()
		case '{':
			depth = 1
			if fn, ok := funcName(decl.String()); ok {
				cur = &Func{Name: fn, Start: declStart, LongReasons: docHasMarker(s.comments, declStart)}
			}
			decl.Reset()
		default:
			if decl.Len() == 0 && c == ' ' {
				continue
			}
			if decl.Len() == 0 {
				declStart = line
			}
			decl.WriteByte(c)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("codesize: %s: %d brace(s) open at the end of the file", name, depth)
	}
	return out, nil
}

func braceDelta(c byte) int {
	switch c {
	case '{':
		return 1
	case '}':
		return -1
	}
	return 0
}

// funcName: the declarator's name when decl is a function's declaration, i.e. the identifier
// before its first parenthesis that is not an attribute.
func funcName(decl string) (string, bool) {
	d := strings.TrimSpace(decl)
	if !strings.HasSuffix(d, ")") || strings.Contains(d, "=") {
		return "", false
	}
	for from := 0; ; {
		k := strings.IndexByte(d[from:], '(')
		if k < 0 {
			return "", false
		}
		k += from
		id := lastIdent(d[:k])
		if id != "" && id != "__attribute__" && id != "__declspec" {
			return id, true
		}
		from = matching(d, k) + 1
		if from <= k {
			return "", false
		}
	}
}

func lastIdent(s string) string {
	s = strings.TrimRight(s, " \t")
	j := len(s)
	for j > 0 && isIdent(s[j-1]) {
		j--
	}
	return s[j:]
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// matching is the index of the ')' closing the '(' at k, or -1.
func matching(s string, k int) int {
	n := 0
	for i := k; i < len(s); i++ {
		switch s[i] {
		case '(':
			n++
		case ')':
			n--
			if n == 0 {
				return i
			}
		}
	}
	return -1
}

// docHasMarker: the comment block (consecutive comments, line after line) that ends on the line
// before start carries the marker with a reason.
func docHasMarker(cs []comment, start int) bool {
	want := start - 1
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if c.end > want {
			continue // within the declaration, or on its first line
		}
		if c.end != want {
			return false
		}
		if markerRe.MatchString(c.text) {
			return true
		}
		want = c.start - 1
	}
	return false
}
