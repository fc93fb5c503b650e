package memjudge

import (
	"strings"
	"testing"
)

const truthTwoUnits = `{"units":[{"unit":0,"gpu":0,"mig":-1,"uuid":"GPU-a","total":100,"used":70},` +
	`{"unit":1,"gpu":1,"mig":-1,"uuid":"GPU-b","total":100,"used":0}],` +
	`"procs":[{"slot":3,"pid":42,"used":[40,0],"ctx":[20,0]}],` +
	`"shared":[{"id":7,"unit":0,"bytes":10,"kind":"ipc","holders":[42,43]}]}`

func TestDecodeTruth(t *testing.T) {
	got, err := DecodeTruth([]byte(truthTwoUnits))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Units) != 2 || got.Units[0].Used != 70 || got.Procs[0].Pid != 42 || got.Procs[0].Ctx[0] != 20 ||
		got.Shared[0].Holders[1] != 43 || got.UnitOf("GPU-b") != 1 || got.UnitOf("GPU-c") != -1 {
		t.Fatalf("decoded %+v", got)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", "fgtruth: no state", "decode fgtruth output"},
		{"a process short of units", strings.Replace(truthTwoUnits, `"used":[40,0]`, `"used":[40]`, 1), "lists 1/2 units"},
		{"a shared allocation on no unit", strings.Replace(truthTwoUnits, `"unit":0,"bytes"`, `"unit":5,"bytes"`, 1), "on unit 5 of 2"},
	} {
		if _, err := DecodeTruth([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeTruth: whatever fgtruth printed, the decoder errs or returns a truth every property
// can index (each process lists every unit, each shared allocation names one).
func FuzzDecodeTruth(f *testing.F) {
	f.Add([]byte(truthTwoUnits))
	f.Add([]byte(`{"units":[],"procs":[],"shared":[]}`))
	f.Add([]byte(`{"procs":[{"used":[1],"ctx":[]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := DecodeTruth(b)
		if err != nil {
			return
		}
		for _, p := range tr.Procs {
			if len(p.Used) != len(tr.Units) || len(p.Ctx) != len(tr.Units) {
				t.Fatalf("process %d: %d/%d entries for %d units", p.Pid, len(p.Used), len(p.Ctx), len(tr.Units))
			}
		}
		for _, s := range tr.Shared {
			if s.Unit < 0 || s.Unit >= len(tr.Units) {
				t.Fatalf("shared allocation on unit %d of %d", s.Unit, len(tr.Units))
			}
		}
	})
}

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		code int
		n    int
		bad  bool
	}{
		{"ok", true, 0, 0, false},
		{"ok GPU-a 3", true, 0, 2, false},
		{"err 2", false, 2, 0, false},
		{"err -1 open /x", false, -1, 2, false},
		{"err two", false, 0, 0, true},
		{"hello 12", false, 0, 0, true},
		{"", false, 0, 0, true},
	} {
		r, err := parseReply(tc.in)
		if (err != nil) != tc.bad || (err == nil && (r.ok != tc.ok || r.code != tc.code || len(r.fields) != tc.n)) {
			t.Errorf("parseReply(%q) = %+v, %v", tc.in, r, err)
		}
	}
}

// FuzzParseReply: a reply is ok, or err with a code, or an error naming the line.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"ok", "ok 1 2", "err 2", "err -1 x", "err x", "hello 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, l string) {
		r, err := parseReply(l)
		if err != nil {
			if !strings.Contains(err.Error(), "memload reply") {
				t.Fatalf("error %v does not name the reply", err)
			}
			return
		}
		if r.text != l || (!r.ok && !strings.HasPrefix(strings.TrimSpace(l), "err")) {
			t.Fatalf("parseReply(%q) = %+v", l, r)
		}
	})
}
