package schema

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzReadChecks: any input is read or refused with an error, never a panic; whatever is read
// validates and writes back to a line that reads the same.
func FuzzReadChecks(f *testing.F) {
	f.Add(`{"section":"memory","check":"env 4096","verdict":"pass","want":"refused"}`)
	f.Add(`{"section":"a","check":"b","verdict":"fail","figure":0.4,"lo":0.28,"hi":0.32,"noise":0.02,"worse":"up","fake":1,"key":"k"}`)
	f.Add("\n\n{\"section\":\"a\"}\n")
	f.Add(`{"section":"a","check":"b","verdict":"info","figure":1e308}`)
	f.Fuzz(func(t *testing.T, in string) {
		cs, err := ReadChecks(strings.NewReader(in), "fuzz")
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz") {
			t.Fatalf("error does not name the input: %v", err)
		}
		for i := range cs {
			line, err := cs[i].Line()
			if err != nil {
				t.Fatalf("a read check does not write: %v", err)
			}
			back, err := ReadChecks(bytes.NewReader(line), "again")
			if err != nil || len(back) != 1 || back[0].ID() != cs[i].ID() {
				t.Fatalf("written %q, read back %+v, %v", line, back, err)
			}
		}
	})
}

// FuzzParseSeries: any series file is read or refused; what is read writes back and reads the same.
func FuzzParseSeries(f *testing.F) {
	f.Add(series)
	f.Add("# title: t\nx,line,y\n1,a,2\n")
	f.Add("# title: t\n# ref r: 1e3\nx,line,y\n1,,2\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSeries(strings.NewReader(in), "fuzz", "series/fuzz.csv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "series/fuzz.csv") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		var b strings.Builder
		if err := s.WriteCSV(&b); err != nil {
			t.Fatalf("a read series does not write: %v", err)
		}
		again, err := ParseSeries(strings.NewReader(b.String()), "fuzz", "again")
		if err != nil || again.Points() != s.Points() || len(again.Lines) != len(s.Lines) {
			t.Fatalf("written\n%s\nread back %+v, %v", b.String(), again, err)
		}
	})
}

// FuzzReadReport: report.json readers never panic and name the file in their errors.
func FuzzReadReport(f *testing.F) {
	f.Add(`{"schema":"limitbed-gpu-report/1","verdict":"pass","checks":[]}`)
	f.Add(`{"schema":"limitbed-gpu-report/1","verdict":"fail","checks":[{"section":"a","check":"b","verdict":"fail"}]}`)
	f.Add(`{"schema":"x"}`)
	f.Fuzz(func(t *testing.T, in string) {
		if _, err := ReadReport([]byte(in), "fuzz.json"); err != nil && !strings.HasPrefix(err.Error(), "fuzz.json") {
			t.Fatalf("error does not name the input: %v", err)
		}
		if _, err := ReadSections(strings.NewReader(in), "fuzz.jsonl"); err != nil && !strings.HasPrefix(err.Error(), "fuzz.jsonl") {
			t.Fatalf("error does not name the input: %v", err)
		}
	})
}
