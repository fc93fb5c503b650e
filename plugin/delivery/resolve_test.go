package delivery

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

func ptr(d v1.LimitDelivery) *v1.LimitDelivery { return &d }

func pod(ann string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	if ann != "-" {
		p.Annotations = map[string]string{annotations.LimitDelivery: ann}
	}
	return p
}

// TestResolveTable walks annotation × node × global × admin gate.
func TestResolveTable(t *testing.T) {
	F, E := v1.LimitDeliveryFile, v1.LimitDeliveryEnv
	cases := []struct {
		ann          string // "-" = no annotation
		node, global *v1.LimitDelivery
		allow        bool
		mode         v1.LimitDelivery
		source       Source
		ignored      bool
	}{
		{"-", nil, nil, false, F, SourceDefault, false},
		{"-", nil, ptr(E), false, E, SourceGlobalConfig, false},
		{"-", ptr(F), ptr(E), false, F, SourceNodeConfig, false},
		{"-", ptr(E), ptr(F), false, E, SourceNodeConfig, false},
		{"env", nil, nil, false, F, SourceDefault, true},
		{"env", nil, nil, true, E, SourcePodAnnotation, false},
		{"env", ptr(F), ptr(E), false, F, SourceNodeConfig, true},
		{"env", ptr(F), nil, true, E, SourcePodAnnotation, false},
		{"env", nil, ptr(F), false, F, SourceGlobalConfig, true},
		{"env", nil, ptr(E), false, E, SourcePodAnnotation, false}, // not a downgrade
		{"env", ptr(E), nil, false, E, SourcePodAnnotation, false},
		{"file", ptr(E), ptr(E), false, F, SourcePodAnnotation, false}, // upgrade always allowed
		{"file", nil, nil, false, F, SourcePodAnnotation, false},
		{"file", ptr(E), nil, true, F, SourcePodAnnotation, false},
	}
	for _, tc := range cases {
		name := "ann=" + tc.ann + "/node=" + str(tc.node) + "/global=" + str(tc.global)
		if tc.allow {
			name += "/allowed"
		}
		t.Run(name, func(t *testing.T) {
			d, err := Resolve(pod(tc.ann), Layers{Node: tc.node, Global: tc.global, AllowPodOverride: tc.allow})
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tc.mode || d.Source != tc.source || d.Ignored != tc.ignored {
				t.Fatalf("got %+v, want mode=%s source=%s ignored=%v", d, tc.mode, tc.source, tc.ignored)
			}
		})
	}
}

func str(d *v1.LimitDelivery) string {
	if d == nil {
		return "unset"
	}
	return string(*d)
}

func TestResolveInvalidAnnotation(t *testing.T) {
	for _, v := range []string{"envv", "", "ENV", " env", "file "} {
		_, err := Resolve(pod(v), Layers{AllowPodOverride: true})
		want := `pod default/x annotation hami.io/limit-delivery: "` + v + `" is not one of file|env`
		if err == nil || err.Error() != want {
			t.Errorf("Resolve(%q) err = %v, want %q", v, err, want)
		}
	}
}

type recorder struct{ events []string }

func (r *recorder) Eventf(_ runtime.Object, typ, reason, format string, args ...any) {
	r.events = append(r.events, typ+" "+reason)
}

func TestReportIgnored(t *testing.T) {
	r := &recorder{}
	d, _ := Resolve(pod("env"), Layers{})
	ReportIgnored(klog.Background(), r, pod("env"), d)
	if len(r.events) != 1 || !strings.Contains(r.events[0], "Warning "+ReasonOverrideIgnored) {
		t.Fatalf("events = %v", r.events)
	}
	r.events = nil
	d, _ = Resolve(pod("env"), Layers{AllowPodOverride: true})
	ReportIgnored(klog.Background(), r, pod("env"), d)
	ReportIgnored(klog.Background(), nil, pod("env"), Decision{Ignored: true}) // nil recorder is fine
	if len(r.events) != 0 {
		t.Fatalf("unexpected events %v", r.events)
	}
}
