package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReadChecks(t *testing.T) {
	cases := []struct {
		name, in string
		n        int
		err      string
	}{
		{"one check", `{"section":"memory","check":"env 4096","verdict":"pass","want":"refused"}`, 1, ""},
		{"blank lines", "\n" + `{"section":"a","check":"b","verdict":"info","figure":1.5,"unit":"µs"}` + "\n\n", 1, ""},
		{"bounded figure", `{"section":"a","check":"b","verdict":"fail","figure":0.4,"lo":0.28,"hi":0.32,"noise":0.02,"worse":"up"}`, 1, ""},
		{"not json", `PASS memory`, 0, "line 1: not a check record"},
		{"unknown field", `{"section":"a","check":"b","verdict":"pass","figur":1}`, 0, `unknown field "figur"`},
		{"bad verdict", `{"section":"a","check":"b","verdict":"ok"}`, 0, `verdict "ok": want pass, fail, skip or info`},
		{"no section", `{"check":"b","verdict":"pass"}`, 0, "section: empty"},
		{"pipe in a name", `{"section":"a","check":"b|c","verdict":"pass"}`, 0, "no newline, tab or |"},
		{"lo above hi", `{"section":"a","check":"b","verdict":"pass","lo":2,"hi":1}`, 0, "lo above hi"},
		{"negative noise", `{"section":"a","check":"b","verdict":"pass","noise":-1}`, 0, "noise -1"},
		{"bad worse", `{"section":"a","check":"b","verdict":"pass","worse":"sideways"}`, 0, `worse "sideways"`},
		{"two values on a line", `{"section":"a","check":"b","verdict":"pass"} {}`, 0, "more than one JSON value"},
		{"second line bad", `{"section":"a","check":"b","verdict":"pass"}` + "\n{", 1, "line 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadChecks(strings.NewReader(c.in), "records/x.jsonl")
			if len(got) != c.n {
				t.Errorf("%d checks, want %d", len(got), c.n)
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "records/x.jsonl")):
				t.Errorf("error %v, want one naming the file and %q", err, c.err)
			}
		})
	}
}

func TestCheckLineRoundTrip(t *testing.T) {
	c := Check{Section: "overhead", Check: "launch: library minus native", Verdict: Pass, Figure: Float(0.2), Unit: "µs",
		Hi: Float(1.5), Noise: Float(0.75), Worse: "up"}
	line, err := c.Line()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadChecks(strings.NewReader(string(line)), "line")
	if err != nil || len(back) != 1 || *back[0].Figure != 0.2 || *back[0].Hi != 1.5 || back[0].Worse != "up" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if _, err := (&Check{Section: "a", Verdict: Pass}).Line(); err == nil {
		t.Error("a check without a name was written")
	}
}

func TestInBounds(t *testing.T) {
	for _, c := range []struct {
		fig, lo, hi *float64
		want        bool
	}{
		{Float(0.3), Float(0.28), Float(0.32), true},
		{Float(0.33), Float(0.28), Float(0.32), false},
		{Float(5), nil, Float(20), true},
		{Float(25), nil, Float(20), false},
		{Float(1), Float(0.95), nil, true},
		{nil, Float(0), Float(1), false},
	} {
		ch := Check{Figure: c.fig, Lo: c.lo, Hi: c.hi}
		if got := ch.InBounds(); got != c.want {
			t.Errorf("figure %v within %v..%v: %v, want %v", c.fig, c.lo, c.hi, got, c.want)
		}
	}
}

const series = `# title: sched 30+50: each pod's share per second
# x: seconds
# y: share
# ref limit pod 30: 0.30
# a plain comment
x,line,y
1,pod 30,0.29
1,pod 50,0.49
2,pod 30,0.31
`

func TestParseSeries(t *testing.T) {
	s, err := ParseSeries(strings.NewReader(series), "sched-30-50", "series/sched-30-50.csv")
	if err != nil {
		t.Fatal(err)
	}
	if s.Title != "sched 30+50: each pod's share per second" || s.X != "seconds" || s.Points() != 3 || len(s.Lines) != 2 ||
		len(s.Lines[0].Points) != 2 || len(s.Refs) != 1 || s.Refs[0].Y != 0.3 || s.Refs[0].Name != "limit pod 30" {
		t.Fatalf("parsed %+v", s)
	}
	var b strings.Builder
	if err := s.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	again, err := ParseSeries(strings.NewReader(b.String()), s.ID, "rewritten")
	if err != nil || again.Points() != 3 || again.Title != s.Title || len(again.Refs) != 1 {
		t.Fatalf("written and read again: %+v, %v\n%s", again, err, b.String())
	}
	for _, c := range []struct{ name, id, in, err string }{
		{"bad id", "Sched 30", series, "series name"},
		{"no title", "x", "x,line,y\n1,a,2\n", "no \"# title"},
		{"bad header", "x", "# title: t\nt,name,v\n", "want \"x,line,y\""},
		{"two fields", "x", "# title: t\nx,line,y\n1,2\n", "three fields"},
		{"not a number", "x", "# title: t\nx,line,y\n1,a,b\n", "y: \"b\" is not a finite number"},
		{"infinite", "x", "# title: t\nx,line,y\nInf,a,1\n", "not a finite number"},
		{"bad reference", "x", "# title: t\n# ref limit: high\nx,line,y\n", "reference"},
	} {
		if _, err := ParseSeries(strings.NewReader(c.in), c.id, "series/x.csv"); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
}

func TestReadReport(t *testing.T) {
	r := Report{Schema: ReportSchema, Verdict: "fail", Checks: []Check{{Section: "a", Check: "b", Verdict: Fail}}}
	b, _ := json.Marshal(r)
	if _, err := ReadReport(b, "report.json"); err != nil {
		t.Fatal(err)
	}
	r.Schema = "limitbed-gpu-report/0"
	b, _ = json.Marshal(r)
	if _, err := ReadReport(b, "old.json"); err == nil || !strings.Contains(err.Error(), "old.json: schema") {
		t.Errorf("another schema: %v", err)
	}
	r.Schema, r.Checks[0].Verdict = ReportSchema, "maybe"
	b, _ = json.Marshal(r)
	if _, err := ReadReport(b, "bad.json"); err == nil || !strings.Contains(err.Error(), "check 1 (a/b)") {
		t.Errorf("a bad check: %v", err)
	}
	if _, err := ReadReport([]byte("{"), "cut.json"); err == nil || !strings.Contains(err.Error(), "cut.json: not a GPU report") {
		t.Errorf("a cut file: %v", err)
	}
}

func TestReadSectionsAndCard(t *testing.T) {
	s, err := ReadSections(strings.NewReader(`{"name":"memory","exit":0,"seconds":1.5,"ended":"2026-01-01T00:00:00Z"}`+"\n"), "sections.jsonl")
	if err != nil || len(s) != 1 || s[0].Seconds != 1.5 {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := ReadSections(strings.NewReader(`{"name":""}`), "sections.jsonl"); err == nil {
		t.Error("a section without a name was read")
	}
	if _, err := ReadCard([]byte(`{"error":"nvmlInit_v2: Driver Not Loaded"}`), "card.json"); err == nil {
		t.Error("a card without a name was read")
	}
	c, err := ReadCard([]byte(`{"name":"NVIDIA H200","sm_count":132,"new_field":1}`), "card.json")
	if err != nil || c.SMs != 132 {
		t.Errorf("%+v %v", c, err)
	}
}
