package limitsfile

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseTolerant(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    map[string]string
		skipped []int
	}{
		{"clean", "A=1\nB=2\n", map[string]string{"A": "1", "B": "2"}, nil},
		{"bad line does not stop the rest", "A=1\ngarbage\nB=2\n", map[string]string{"A": "1", "B": "2"}, []int{2}},
		{"blank line", "A=1\n\nB=2\n", map[string]string{"A": "1", "B": "2"}, []int{2}},
		{"comment", "#A=1\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"CRLF tolerated", "A=1\r\nB=2\r\n", map[string]string{"A": "1", "B": "2"}, nil},
		{"inner CR", "A=1\r2\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"NUL", "A=1\x00\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"empty key", "=1\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"value keeps equals", "A=b=c\n", map[string]string{"A": "b=c"}, nil},
		{"empty value allowed", "A=\n", map[string]string{"A": ""}, nil},
		{"duplicate last wins", "A=1\nA=2\n", map[string]string{"A": "2"}, nil},
		{"truncated tail", "A=1\nCUDA_DEVICE_MEMORY_LIMIT_0=30", map[string]string{"A": "1"}, []int{2}},
		{"bad memory value", "CUDA_DEVICE_MEMORY_LIMIT_0=3000mb\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"too long", "A=" + strings.Repeat("x", MaxLineLen) + "\nB=2\n", map[string]string{"B": "2"}, []int{1}},
		{"longest allowed", "A=" + strings.Repeat("x", MaxLineLen-3) + "\n", map[string]string{"A": strings.Repeat("x", MaxLineLen-3)}, nil},
		{"empty file", "", map[string]string{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Parse([]byte(tc.in))
			if !maps.Equal(p.Vars, tc.want) {
				t.Errorf("vars = %v, want %v", p.Vars, tc.want)
			}
			if got := p.Skipped(); !slices.Equal(got, tc.skipped) && !(len(got) == 0 && len(tc.skipped) == 0) {
				t.Errorf("skipped = %v, want %v (%+v)", got, tc.skipped, p.Bad)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_SM_LIMIT=50\nHAMI_LIMITS_FORMAT=1\n"))
	f.Add([]byte("a\r\n=\n\x00\nB=1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := Parse(data)
		lines := strings.Count(string(data), "\n")
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		if len(p.Bad) > lines {
			t.Fatalf("%d bad lines out of %d", len(p.Bad), lines)
		}
		for i, b := range p.Bad {
			if b.Number < 1 || b.Number > lines || (i > 0 && b.Number <= p.Bad[i-1].Number) {
				t.Fatalf("bad line numbers out of order or range: %+v", p.Bad)
			}
		}
		// Whatever survived parsing and is renderable must round-trip.
		vars := maps.Clone(p.Vars)
		delete(vars, FormatKey)
		out, err := Render(vars)
		if err != nil {
			return
		}
		again := Parse(out)
		if len(again.Bad) != 0 {
			t.Fatalf("rendered file has bad lines: %+v\n%q", again.Bad, out)
		}
		delete(again.Vars, FormatKey)
		if !maps.Equal(again.Vars, vars) {
			t.Fatalf("round trip changed vars: %v -> %v", vars, again.Vars)
		}
	})
}

func FuzzRender(f *testing.F) {
	f.Add("CUDA_DEVICE_SM_LIMIT", "50", "CUDA_DEVICE_MEMORY_LIMIT_0", "3000m")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		out, err := Render(map[string]string{k1: v1, k2: v2})
		if err != nil {
			return
		}
		p := Parse(out)
		if len(p.Bad) != 0 {
			t.Fatalf("Render produced a file with bad lines %+v: %q", p.Bad, out)
		}
		if p.Vars[k1] != v1 && k1 != k2 || p.Vars[k2] != v2 || p.Vars[FormatKey] != FormatVersion {
			t.Fatalf("round trip lost a value: %q", out)
		}
	})
}
