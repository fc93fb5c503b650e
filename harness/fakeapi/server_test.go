package fakeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limitbed/limitbed/plugin/annotations"
	"github.com/limitbed/limitbed/plugin/pods"
)

func pod(ns, name, node string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "x"}}},
	}
}

// start seeds a server with pods on two nodes and returns a client-go clientset reading it through
// a kubeconfig file written by WriteKubeconfig (the path a plugin binary takes).
func start(t *testing.T) (*Server, kubernetes.Interface) {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, p := range []*corev1.Pod{
		pod("default", "a1", "node-a", map[string]string{"k": "v", "gone": "x"}),
		pod("other", "a2", "node-a", nil),
		pod("default", "b1", "node-b", nil),
	} {
		if err := s.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != s.URL {
		t.Fatalf("kubeconfig server = %s, want %s", cfg.Host, s.URL)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, kube
}

func names(ps []corev1.Pod) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return strings.Join(out, ",")
}

// TestDiscovery: client-go's version and discovery calls succeed and list pods, nodes and events.
func TestDiscovery(t *testing.T) {
	_, kube := start(t)
	v, err := kube.Discovery().ServerVersion()
	if err != nil || v.Major != "1" {
		t.Fatalf("ServerVersion = %+v, %v", v, err)
	}
	_, lists, err := kube.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			got = append(got, l.GroupVersion+"/"+r.Name)
		}
	}
	if strings.Join(got, " ") != "v1/pods v1/nodes v1/events" {
		t.Fatalf("resources = %v", got)
	}
}

// TestListPods: field and label selectors filter server-side, across namespaces and within one;
// an unsupported field is a 400 as on a real API server.
func TestListPods(t *testing.T) {
	_, kube := start(t)
	ctx := context.Background()
	cases := []struct {
		name, ns, fsel, lsel, want string
		badRequest                 bool
	}{
		{name: "all", want: "default/a1,default/b1,other/a2"},
		{name: "node-a all namespaces", fsel: "spec.nodeName=node-a", want: "default/a1,other/a2"},
		{name: "node-a in default", ns: "default", fsel: "spec.nodeName=node-a", want: "default/a1"},
		{name: "not node-a", fsel: "spec.nodeName!=node-a", want: "default/b1"},
		{name: "no such node", fsel: "spec.nodeName=node-z", want: ""},
		{name: "by name", fsel: "metadata.name=a2", want: "other/a2"},
		{name: "label", lsel: "app=b1", want: "default/b1"},
		{name: "unsupported field", fsel: "spec.schedulerName=x", badRequest: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := kube.CoreV1().Pods(tc.ns).List(ctx, metav1.ListOptions{FieldSelector: tc.fsel, LabelSelector: tc.lsel})
			if tc.badRequest {
				if !apierrors.IsBadRequest(err) {
					t.Fatalf("err = %v, want BadRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(l.Items); got != tc.want {
				t.Fatalf("pods = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPatchPod: each accepted patch type changes annotations with merge semantics (set, remove,
// leave the rest), bumps resourceVersion and is visible to GET; the rest is refused with the status
// a client can tell apart.
func TestPatchPod(t *testing.T) {
	cases := []struct {
		name  string
		typ   types.PatchType
		pod   string
		body  string
		want  map[string]string // annotations after; nil with check
		check func(error) bool
	}{
		{name: "merge set and delete", typ: types.MergePatchType, pod: "a1",
			body: `{"metadata":{"annotations":{"new":"1","k":"w","gone":null}}}`, want: map[string]string{"k": "w", "new": "1"}},
		{name: "strategic merge", typ: types.StrategicMergePatchType, pod: "a1",
			body: `{"metadata":{"annotations":{"new":"2"}}}`, want: map[string]string{"k": "v", "gone": "x", "new": "2"}},
		{name: "merge on a pod without annotations", typ: types.MergePatchType, pod: "b1",
			body: `{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}`, want: map[string]string{"hami.io/bind-phase": "success"}},
		{name: "json patch", typ: types.JSONPatchType, pod: "a1",
			body: `[{"op":"test","path":"/metadata/annotations/k","value":"v"},{"op":"replace","path":"/metadata/annotations/k","value":"z"},` +
				`{"op":"add","path":"/metadata/annotations/a~1b","value":"s"},{"op":"remove","path":"/metadata/annotations/gone"}]`,
			want: map[string]string{"k": "z", "a/b": "s"}},
		{name: "json patch failed test is atomic", typ: types.JSONPatchType, pod: "a1",
			body:  `[{"op":"remove","path":"/metadata/annotations/k"},{"op":"test","path":"/metadata/annotations/gone","value":"no"}]`,
			check: apierrors.IsInvalid},
		{name: "apply patch refused", typ: types.ApplyYAMLPatchType, pod: "a1", body: `metadata: {annotations: {k: v}}`,
			check: apierrors.IsUnsupportedMediaType},
		{name: "spec refused", typ: types.MergePatchType, pod: "a1", body: `{"spec":{"nodeName":"node-b"}}`, check: apierrors.IsInvalid},
		{name: "non-string value refused", typ: types.MergePatchType, pod: "a1", body: `{"metadata":{"annotations":{"k":1}}}`,
			check: apierrors.IsInvalid},
		{name: "stale resourceVersion", typ: types.MergePatchType, pod: "a1",
			body: `{"metadata":{"resourceVersion":"999","annotations":{"k":"w"}}}`, check: apierrors.IsConflict},
		{name: "missing pod", typ: types.MergePatchType, pod: "nope", body: `{"metadata":{"annotations":{"k":"w"}}}`,
			check: apierrors.IsNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, kube := start(t)
			ctx := context.Background()
			before, _ := s.Pod("default", tc.pod)
			out, err := kube.CoreV1().Pods("default").Patch(ctx, tc.pod, tc.typ, []byte(tc.body), metav1.PatchOptions{})
			if tc.check != nil {
				if !tc.check(err) {
					t.Fatalf("err = %v, want it to satisfy %s", err, tc.name)
				}
				if after, ok := s.Pod("default", tc.pod); ok && after.ResourceVersion != before.ResourceVersion {
					t.Fatalf("refused patch changed the pod: %v", after.Annotations)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := kube.CoreV1().Pods("default").Get(ctx, tc.pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !mapsEqual(got.Annotations, tc.want) || !mapsEqual(out.Annotations, tc.want) {
				t.Fatalf("annotations = %v (response %v), want %v", got.Annotations, out.Annotations, tc.want)
			}
			if got.ResourceVersion == before.ResourceVersion || got.UID != before.UID || got.Spec.NodeName != before.Spec.NodeName {
				t.Fatalf("after patch: rv %s→%s uid %s→%s", before.ResourceVersion, got.ResourceVersion, before.UID, got.UID)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestNotFound: GET, PATCH and DELETE of absent objects and unknown resources are 404s.
func TestNotFound(t *testing.T) {
	_, kube := start(t)
	ctx := context.Background()
	_, err := kube.CoreV1().Pods("default").Get(ctx, "nope", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get pod: %v", err)
	}
	if _, err := kube.CoreV1().Pods("other").Get(ctx, "a1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get pod in the wrong namespace: %v", err)
	}
	if err := kube.CoreV1().Pods("default").Delete(ctx, "nope", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("delete: %v", err)
	}
	if _, err := kube.CoreV1().Nodes().Get(ctx, "node-z", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get node: %v", err)
	}
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("configmap: %v", err)
	}
	if err := kube.CoreV1().Pods("default").Delete(ctx, "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("default").Get(ctx, "a1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get deleted pod: %v", err)
	}
}

// TestNodeAnnotations: a node's annotations can be read and merge-patched (HAMi's registration).
func TestNodeAnnotations(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	_, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"annotations":{"hami.io/node-handshake":"Reported"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || n.Annotations["hami.io/node-handshake"] != "Reported" {
		t.Fatalf("node = %v, %v", n, err)
	}
	if got, _ := s.Node("node-a"); got.Annotations["hami.io/node-handshake"] != "Reported" {
		t.Fatalf("store: %v", got.Annotations)
	}
}

// TestEventsAndCreate: events and pods created through client-go land in the store.
func TestEventsAndCreate(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	_, err := kube.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1"}, Reason: "R"},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Reason != "R" || ev[0].Namespace != "default" {
		t.Fatalf("events = %+v", ev)
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod("", "c1", "node-a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod("", "c1", "node-a", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	if p, ok := s.Pod("default", "c1"); !ok || p.UID == "" {
		t.Fatalf("created pod = %v", p)
	}
}

// TestNodeLockConcurrency: the node lock protocol as HAMi's scheduler and plugin speak it: a merge
// patch carrying the resourceVersion the writer read succeeds and bumps the version; a second
// writer with the same, now stale, version gets 409 Conflict and the annotation is unchanged.
func TestNodeLockConcurrency(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	n, err := kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lock := func(value, rv string) error {
		body := fmt.Sprintf(`{"metadata":{"annotations":{"hami.io/mutex.lock":%s},"resourceVersion":%q}}`, value, rv)
		_, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	if err := lock(`"2026-01-01T00:00:00Z,default,a1"`, n.ResourceVersion); err != nil {
		t.Fatalf("lock with the current version: %v", err)
	}
	if err := lock(`"2026-01-01T00:00:00Z,default,b1"`, n.ResourceVersion); !apierrors.IsConflict(err) {
		t.Fatalf("lock with a stale version: %v, want 409 Conflict", err)
	}
	got, _ := s.Node("node-a")
	if v := got.Annotations["hami.io/mutex.lock"]; v != "2026-01-01T00:00:00Z,default,a1" {
		t.Fatalf("lock = %q after the conflicting patch", v)
	}
	if err := lock("null", got.ResourceVersion); err != nil {
		t.Fatalf("release with the current version: %v", err)
	}
	if got, _ := s.Node("node-a"); got.Annotations["hami.io/mutex.lock"] != "" {
		t.Fatalf("lock still %q after release", got.Annotations["hami.io/mutex.lock"])
	}
}

// TestPluginPodsClient: the plugin's own pod client (plugin/pods) finds the pod the node lock names
// through the field selector and claims its entry with the resourceVersion read (bind-phase=success
// in the same patch), exactly as in Allocate; a claim on a stale version is a conflict.
func TestPluginPodsClient(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	devs := annotations.PodDevices{{{UUID: "GPU-0", Type: "NVIDIA", UsedMem: 3000}}}
	p := pod("default", "gpu", "node-a", map[string]string{
		annotations.DevicesToAllocate: devs.Encode(),
		annotations.VGPUNode:          "node-a",
		annotations.BindPhase:         string(annotations.PhaseAllocating),
		annotations.BindTime:          "100",
	})
	if err := s.AddPod(p); err != nil {
		t.Fatal(err)
	}
	lock := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotations.NodeLock, annotations.FormatNodeLock(time.Now(), "default", "gpu"))
	if _, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(lock), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c := &pods.Client{Kube: kube, NodeName: "node-a"}
	pl, err := c.Placement(ctx, "nvidia.com/gpu")
	if err != nil || pl.Pod == nil || pl.Pod.Name != "gpu" {
		t.Fatalf("Placement = %+v, %v", pl, err)
	}
	got := pl.Pod
	if err := c.Claim(ctx, got, annotations.PodDevices{{}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Claim(ctx, got, annotations.PodDevices{{}}); !errors.Is(err, pods.ErrConflict) {
		t.Fatalf("a second claim on the version read: %v, want a conflict", err)
	}
	stored, _ := s.Pod("default", "gpu")
	if ph := stored.Annotations[annotations.BindPhase]; ph != string(annotations.PhaseSuccess) {
		t.Fatalf("bind-phase = %q; requests %v", ph, s.Requests())
	}
	want := "GET /api/v1/pods?fieldSelector=" + fields.OneTermEqualSelector("spec.nodeName", "node-a").String()
	var seen bool
	for _, r := range s.Requests() {
		seen = seen || strings.HasPrefix(strings.ReplaceAll(r, "%3D", "="), want)
	}
	if !seen {
		t.Fatalf("no %q among %v", want, s.Requests())
	}
}

// TestResourceDifferences: pods and nodes share one handler, and differ where a real API server
// differs for this server's purposes: nodes are neither created nor deleted over HTTP and select on
// metadata.name only; pods are created only in a namespace.
func TestResourceDifferences(t *testing.T) {
	s, _ := start(t)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/api/v1/nodes?fieldSelector=spec.nodeName%3Dx", http.StatusBadRequest},
		{http.MethodGet, "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a", http.StatusOK},
		{http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", http.StatusOK},
		{http.MethodGet, "/api/v1/pods?fieldSelector=spec.hostname%3Dx", http.StatusBadRequest},
		{http.MethodPost, "/api/v1/nodes", http.StatusMethodNotAllowed},
		{http.MethodPost, "/api/v1/pods", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/api/v1/nodes/node-a", http.StatusMethodNotAllowed},
		{http.MethodGet, "/api/v1/nodes/node-b", http.StatusNotFound},
		{http.MethodDelete, "/api/v1/namespaces/default/pods/b1", http.StatusOK},
		{http.MethodPut, "/api/v1/namespaces/default/pods/a1", http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
	}
	if _, ok := s.Node("node-a"); !ok {
		t.Error("DELETE removed a node")
	}
	if _, ok := s.Pod("default", "b1"); ok {
		t.Error("DELETE left the pod")
	}
}
