package annotations

import (
	"strings"
	"testing"
	"time"
)

func TestParseNodeLock(t *testing.T) {
	cases := []struct {
		in, ns, name, wantErr string
	}{
		{in: "2026-12-01T08:00:00Z,default,p", ns: "default", name: "p"},
		{in: "2026-12-01T08:00:00Z"}, // legacy: no owner
		{in: "2026-12-01T08:00:00Z,default", wantErr: "want <RFC3339>,<namespace>,<name>"},
		{in: "yesterday,default,p", wantErr: "parsing time"},
		{in: "2026-12-01T08:00:00Z,default,../x", wantErr: `pod name "../x"`},
		{in: "2026-12-01T08:00:00Z,Default,p", wantErr: `namespace "Default"`},
		{in: "2026-12-01T08:00:00Z,,p", wantErr: `namespace ""`},
		{in: "", wantErr: "parsing time"},
	}
	for _, tc := range cases {
		h, err := ParseNodeLock(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || h.Namespace != tc.ns || h.Name != tc.name {
			t.Errorf("%q: %+v, %v", tc.in, h, err)
		}
	}
	h, _ := ParseNodeLock("2026-12-01T08:00:00Z,default,p")
	if !h.Names("default", "p") || h.Names("default", "q") || (LockHolder{}).Names("", "") {
		t.Error("Names")
	}
}

// FuzzParseNodeLock: whatever parses formats back to a value naming the same
// pod, and an owner that parses is a valid namespace and pod name.
func FuzzParseNodeLock(f *testing.F) {
	for _, s := range []string{"2026-01-01T00:00:00Z,default,p", "2026-01-01T00:00:00Z", ",,", "x,y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseNodeLock(s)
		if err != nil {
			return
		}
		if h.Name == "" {
			return
		}
		if strings.ContainsAny(h.Namespace+h.Name, ",/ \x00") {
			t.Fatalf("owner %q/%q accepted", h.Namespace, h.Name)
		}
		h2, err := ParseNodeLock(FormatNodeLock(h.Time, h.Namespace, h.Name))
		if err != nil || !h2.Names(h.Namespace, h.Name) || !h2.Time.Equal(h.Time.Truncate(time.Second)) {
			t.Fatalf("round trip of %q: %+v, %v", s, h2, err)
		}
	})
}
