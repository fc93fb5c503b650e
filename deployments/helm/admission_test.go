package helm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/limitbed/limitbed/plugin/annotations"
)

// policy renders the chart and returns its ValidatingAdmissionPolicy and
// binding (nil when it renders none).
func policy(t *testing.T, vals map[string]any) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	var p *admissionv1.ValidatingAdmissionPolicy
	var b *admissionv1.ValidatingAdmissionPolicyBinding
	for _, doc := range manifests(t, vals) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			continue
		}
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			p = o
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			b = o
		}
	}
	return p, b
}

// admit evaluates the policy's variables, validation and message the way the
// API server does (CEL with the strings extension) for one request.
func admit(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, user string, obj, old any) (bool, string) {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	toMap := func(v any) any {
		if v == nil {
			return nil
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	vars := map[string]any{}
	in := map[string]any{"object": toMap(obj), "oldObject": toMap(old), "request": map[string]any{"userInfo": map[string]any{"username": user}}, "variables": vars}
	eval := func(expr string) any {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(in)
		if err != nil {
			t.Fatalf("eval %q: %v", expr, err)
		}
		return out.Value()
	}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = eval(v.Expression)
	}
	ok := true
	var msg string
	for _, v := range p.Spec.Validations {
		if eval(v.Expression) != true {
			ok = false
			msg = eval(v.MessageExpression).(string)
		}
	}
	return ok, msg
}

func withAnnotations(ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", Annotations: ann}}
}

// The chart's admission policy: a pod's owner (or any controller acting for
// it) cannot set, change or remove a placement annotation; the scheduler's
// service account, the chart's plugin and the listed users can; everything
// else about a pod is untouched.
func TestAdmissionPolicy(t *testing.T) {
	t.Parallel()
	p, b := policy(t, values("admissionPolicy.extraTrustedUsers", []any{"system:serviceaccount:sched:second"}))
	if p == nil || b == nil {
		t.Fatal("the chart renders no admission policy by default")
	}
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Fatalf("binding %+v / failure policy %v: want Deny, Fail", b.Spec, p.Spec.FailurePolicy)
	}
	placed := map[string]string{annotations.BindPhase: "allocating", annotations.DevicesToAllocate: "GPU-a,NVIDIA,1000,0:;"}
	const (
		owner  = "alice"
		sched  = "system:serviceaccount:kube-system:hami-scheduler"
		plugin = "system:serviceaccount:kube-system:limitbed"
		rsCtl  = "system:serviceaccount:kube-system:replicaset-controller"
	)
	cases := []struct {
		name     string
		user     string
		obj, old any
		allowed  bool
		mentions string
	}{
		{"owner creates a pod with its own placement", owner, withAnnotations(placed), nil, false, "alice may not set, change or remove hami.io/vgpu-devices-to-allocate, hami.io/bind-phase"},
		{"a controller copies a placement from a template", rsCtl, withAnnotations(map[string]string{annotations.BindTime: "1"}), nil, false, "hami.io/bind-time"},
		{"owner creates a plain GPU pod", owner, withAnnotations(map[string]string{annotations.LimitDelivery: "file", "team": "x"}), nil, true, ""},
		{"owner rewrites the scheduler's entry", owner, withAnnotations(map[string]string{annotations.BindPhase: "allocating", annotations.DevicesToAllocate: "GPU-a,NVIDIA,0,0:;"}),
			withAnnotations(placed), false, "hami.io/vgpu-devices-to-allocate"},
		{"owner clears a refusal", owner, withAnnotations(nil), withAnnotations(map[string]string{annotations.BindPhase: "failed"}), false, "hami.io/bind-phase"},
		{"owner edits another annotation", owner, withAnnotations(map[string]string{annotations.BindPhase: "allocating", annotations.DevicesToAllocate: "GPU-a,NVIDIA,1000,0:;", "note": "x"}),
			withAnnotations(placed), true, ""},
		{"the scheduler places", sched, withAnnotations(placed), withAnnotations(nil), true, ""},
		{"the plugin hands out the entry", plugin, withAnnotations(map[string]string{annotations.BindPhase: "success", annotations.DevicesToAllocate: ";"}), withAnnotations(placed), true, ""},
		{"a listed user", "system:serviceaccount:sched:second", withAnnotations(placed), nil, true, ""},
		{"a binding carrying a placement", owner, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{annotations.VGPUNode: "n1"}}}, nil, false, "hami.io/vgpu-node"},
		{"the default scheduler's plain binding", "system:kube-scheduler", &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, nil, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := admit(t, p, tc.user, tc.obj, tc.old)
			if ok != tc.allowed || !strings.Contains(msg, tc.mentions) {
				t.Fatalf("allowed = %v (%q), want %v mentioning %q", ok, msg, tc.allowed, tc.mentions)
			}
		})
	}
	if p, _ := policy(t, values("admissionPolicy.enabled", false)); p != nil {
		t.Fatal("admissionPolicy.enabled=false still renders the policy")
	}
}

// The policy guards every placement key of the protocol's owner
// (plugin/annotations) and of HAMi's scheduler, and no key a pod's owner may
// set (hami.io/limit-delivery).
func TestAdmissionPolicyKeys(t *testing.T) {
	t.Parallel()
	p, _ := policy(t, nil)
	var keys string
	for _, v := range p.Spec.Variables {
		if v.Name == "placementKeys" {
			keys = v.Expression
		}
	}
	for _, k := range annotations.PlacementKeys {
		if !strings.Contains(keys, "'"+k+"'") {
			t.Errorf("the policy does not guard %s", k)
		}
	}
	if strings.Contains(keys, annotations.LimitDelivery) {
		t.Error("the policy guards hami.io/limit-delivery, which is the pod owner's (behind the admin gate)")
	}
}
