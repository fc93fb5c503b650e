package paths

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestContainerKey(t *testing.T) {
	for _, tc := range []struct {
		uid, ctr string
		ok       bool
	}{
		{"3b1e0c1c-8e0f-4a8b-9c3d-1f2e3d4c5b6a", "main", true},
		{"", "c", false}, {"u", "", false}, {"..", "c", false}, {"u", "..", false}, {"u/../../etc", "c", false},
		{"a_b", "c", false}, {"u", "Main", false}, {"u", "c.d", false}, {strings.Repeat("u", 129), "c", false},
	} {
		k, err := ContainerKey(tc.uid, tc.ctr)
		if (err == nil) != tc.ok {
			t.Errorf("ContainerKey(%q, %q) = %q, %v; want ok %v", tc.uid, tc.ctr, k, err, tc.ok)
		}
		if tc.ok && k != tc.uid+"_"+tc.ctr {
			t.Errorf("ContainerKey(%q, %q) = %q", tc.uid, tc.ctr, k)
		}
	}
}

func TestHostPaths(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{VGPUDir("/usr/local"), "/usr/local/vgpu"},
		{LibPath("/usr/local"), "/usr/local/vgpu/libvgpu.so"},
		{PreloadPath("/usr/local"), "/usr/local/vgpu/ld.so.preload"},
		{ContainersDir("/usr/local"), "/usr/local/vgpu/containers"},
		{ContainerDir("/h/vgpu/containers", "u_c"), "/h/vgpu/containers/u_c"},
		{LimitsPath("/h/vgpu/containers", "u_c"), "/h/vgpu/containers/u_c.limits"},
		{ContainerUsageCache, "/usr/local/vgpu/usage.cache"},
		{ContainerLibPath, "/usr/local/vgpu/libvgpu.so"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// FuzzParseContainerKey: a name that parses is one ContainerKey makes from
// its parts, and no part can leave the containers directory or be split
// elsewhere.
func FuzzParseContainerKey(f *testing.F) {
	for _, s := range []string{"3b1e0c1c-8e0f-4a8b-9c3d-1f2e3d4c5b6a_main", "uid_c_d", "_main", "u_", "u_..", "u_Main", "u\xff_c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uid, ctr, err := ParseContainerKey(s)
		if err != nil {
			return
		}
		if k, err := ContainerKey(uid, ctr); err != nil || k != s {
			t.Fatalf("%q parsed to %q/%q, which makes %q (%v)", s, uid, ctr, k, err)
		}
		if strings.ContainsAny(uid+ctr, "/\\\x00._\n ") || !utf8.ValidString(s) {
			t.Fatalf("%q accepted", s)
		}
	})
}
