package limitsfile

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// BadLine is a line a tolerant reader skipped.
type BadLine struct {
	Number int    // 1-based
	Reason string // why it was skipped
}

// Parsed is what a reader derives from a limits file.
type Parsed struct {
	// Vars holds every accepted variable with its value verbatim. A key that
	// appears twice keeps its last value, as a sequence of setenv calls would.
	Vars map[string]string
	// Bad lists skipped lines in file order.
	Bad []BadLine
	// Rejected holds the memory keys a line set to a value outside the
	// memory grammar. A key rejected and never set validly refuses every
	// allocation on its device (Resolve), as the C reader does: a damaged
	// limit must not become no limit.
	Rejected map[string]bool
}

// Skipped returns the 1-based numbers of the skipped lines.
func (p *Parsed) Skipped() []int {
	out := make([]int, len(p.Bad))
	for i, b := range p.Bad {
		out[i] = b.Number
	}
	return out
}

// Canonical returns Vars with memory quantities converted to decimal byte
// counts; this is the form the shared test vectors' parsed.env use.
func (p *Parsed) Canonical() map[string]string {
	out := make(map[string]string, len(p.Vars))
	for k, v := range p.Vars {
		if IsMemoryKey(k) {
			if n, err := ParseMemory(v); err == nil {
				v = strconv.FormatUint(n, 10)
			}
		}
		out[k] = v
	}
	return out
}

// FormatEnv renders vars as sorted KEY=VALUE lines (the parsed.env form).
func FormatEnv(vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + vars[k] + "\n")
	}
	return b.String()
}

// Parse reads a limits file tolerantly: a bad line is recorded with its
// number and skipped, and never stops the lines after it (one damaged line
// must not discard the cache path that follows it). Parse never fails; the
// rules are those of docs/limits-file.md, shared with the C reader.
func Parse(data []byte) *Parsed {
	p := &Parsed{Vars: map[string]string{}, Rejected: map[string]bool{}}
	n := 0
	for len(data) > 0 {
		n++
		line := data
		terminated := false
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data, terminated = data[:i], data[i+1:], true
		} else {
			data = nil
		}
		if reason := p.parseLine(line, terminated); reason != "" {
			p.Bad = append(p.Bad, BadLine{Number: n, Reason: reason})
		}
	}
	return p
}

// parseLine applies one line and returns why it was rejected, or "".
func (p *Parsed) parseLine(line []byte, terminated bool) string {
	if !terminated {
		// The writer ends every line with LF; a tail without one is what a
		// torn write looks like ("..._LIMIT_0=30" would mean 30 bytes).
		return "last line has no LF terminator (possibly truncated)"
	}
	if len(line)+1 > MaxLineLen {
		return fmt.Sprintf("line longer than %d bytes", MaxLineLen)
	}
	// Tolerate one CR of a CRLF-edited file; any other CR is damage.
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) == 0 {
		return "empty line"
	}
	if bytes.IndexByte(line, 0) >= 0 {
		return "line contains NUL"
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		return "line contains CR"
	}
	k, v, ok := strings.Cut(string(line), "=")
	if !ok {
		return "no '=' in line"
	}
	if !ValidKey(k) {
		return fmt.Sprintf("key %q is not a valid variable name", k)
	}
	if IsMemoryKey(k) {
		if _, err := ParseMemory(v); err != nil {
			p.Rejected[k] = true
			return err.Error()
		}
	}
	p.Vars[k] = v
	return ""
}
