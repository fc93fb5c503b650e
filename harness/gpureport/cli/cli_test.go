package cli

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// TestGPURecord: what `limitbed gpu record` writes for each kind of check a section records, and
// that bad numbers fail the check instead of losing it.
func TestGPURecord(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		inject  string
		verdict schema.Verdict
		lo, hi  string // the bound written, "" for none
		note    string
	}{
		{"a wanted answer", []string{"--verdict", "pass", "--want", "refused", "--got", "x"}, "", schema.Pass, "", "", ""},
		{"auto within", []string{"--figure", "0.30", "--lo", "0.28", "--hi", "0.32"}, "", schema.Pass, "0.28", "0.32", ""},
		{"auto outside", []string{"--figure", "0.35", "--lo", "0.28", "--hi", "0.32"}, "", schema.Fail, "0.28", "0.32", ""},
		{"auto, only a ceiling", []string{"--figure", "3", "--hi", "20", "--noise", "10", "--worse", "up"}, "", schema.Pass, "", "20", ""},
		{"auto, no figure measured", []string{"--figure", "", "--lo", "0", "--hi", "1"}, "", schema.Fail, "0", "1", "no figure was measured"},
		{"auto, no bound: a figure", []string{"--figure", "7"}, "", schema.Info, "", "", ""},
		{"fidelity within", []string{"--figure", "518", "--fake", "500", "--tol", "16", "--tol-rel", "0.05", "--key", "context_mib"}, "", schema.Pass, "475", "525", ""},
		{"fidelity beyond", []string{"--figure", "2400", "--fake", "1024", "--tol", "300", "--tol-rel", "0.35", "--key", "timeslice_us"}, "", schema.Fail, "665.6", "1382.4", ""},
		{"fidelity, fakegpu gave nothing", []string{"--figure", "1", "--fake", "", "--tol", "1"}, "", schema.Fail, "", "", "fakegpu gave no figure"},
		{"a figure that is not a number", []string{"--figure", "nan", "--lo", "0"}, "", schema.Fail, "0", "", `--figure "nan" is not a number`},
		{"a bound upside down", []string{"--figure", "1", "--lo", "2", "--hi", "1"}, "", schema.Fail, "", "", "lo above hi"},
		{"an injected failure", []string{"--verdict", "pass"}, "sec/the check", schema.Fail, "", "", "injected failure"},
		{"another check's injection", []string{"--verdict", "pass"}, "sec/another", schema.Pass, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := t.TempDir()
			t.Setenv(InjectFailEnv, c.inject)
			var out, errb bytes.Buffer
			args := append([]string{"gpu", "record", "--run", run, "--section", "sec", "--check", "the check"}, c.args...)
			if code := runCLI(args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			f, err := os.Open(filepath.Join(run, "records", "sec.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cs, err := schema.ReadChecks(f, "sec.jsonl")
			if err != nil || len(cs) != 1 {
				t.Fatalf("records: %+v, %v", cs, err)
			}
			got := cs[0]
			if got.Verdict != c.verdict || str(got.Lo) != c.lo || str(got.Hi) != c.hi || !strings.Contains(got.Note, c.note) {
				t.Errorf("record %+v (lo %s hi %s), want %s, bound %q..%q, note with %q", got, str(got.Lo), str(got.Hi), c.verdict, c.lo, c.hi, c.note)
			}
			if !strings.HasPrefix(out.String(), strings.ToUpper(string(c.verdict))+" ") {
				t.Errorf("log line %q does not start with the verdict", out.String())
			}
		})
	}
}

// str is a bound as the cases write it: up to 3 decimals, "" for none.
func str(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(math.Round(*f*1000)/1000, 'f', -1, 64)
}

func TestGPUUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"gpu"}, "usage: limitbed gpu"},
		{[]string{"gpu", "record", "--section", "s", "--check", "c"}, "--run is required"},
		{[]string{"gpu", "record", "--run", "/tmp/x", "--check", "c"}, "section: empty"},
		{[]string{"gpu", "record", "--run", "/tmp/x", "--section", "s", "--check", "c", "--verdict", "ok"}, `--verdict "ok"`},
		{[]string{"gpu", "begin", "--run", "/tmp/x"}, "--run, --card and --sections are required"},
		{[]string{"gpu", "report"}, "usage: limitbed gpu report"},
		{[]string{"gpu", "report", "/nonexistent"}, "run.json"},
		{[]string{"gpu", "compare", "a.json"}, "usage: limitbed gpu compare"},
		{[]string{"gpu", "compare", "/nonexistent/a.json", "/nonexistent/b.json"}, "no such file"},
	} {
		var out, errb bytes.Buffer
		if code := runCLI(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errb.String(), c.err)
		}
	}
}

// runCLI runs `limitbed gpu ARGS...` (args[0] is "gpu") as limitbed does: the error on stderr.
func runCLI(args []string, out, errb *bytes.Buffer) int {
	err := Run(context.Background(), &Env{Stdout: out, Stderr: errb, Logger: slog.New(slog.DiscardHandler)}, args[1:])
	if err != nil {
		fmt.Fprintf(errb, "limitbed gpu: %v\n", err)
	}
	return Code(err)
}
