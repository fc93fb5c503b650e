package plot

import (
	"bytes"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

func TestSVG(t *testing.T) {
	s, err := schema.ParseSeries(strings.NewReader("# title: sched 30+50: shares\n# x: seconds\n# y: share\n# ref limit pod 30: 0.3\n"+
		"x,line,y\n1,pod 30,0.5\n2,pod 30,0.31\n1,pod 50,0.4\n2,pod 50,0.5\n"), "sched-30-50", "test")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := SVG(s, &b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"<svg", "sched 30+50: shares", "pod 50", "limit pod 30"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG has no %q", want)
		}
	}
	empty := &schema.Series{ID: "empty", Title: "nothing"}
	if err := SVG(empty, &b); err == nil || !strings.Contains(err.Error(), "no point") {
		t.Errorf("an empty series: %v, want an error", err)
	}
}
