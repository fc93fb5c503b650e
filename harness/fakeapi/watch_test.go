package fakeapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// TestWatchDeliversEvents: a watch from a list's resourceVersion delivers, in order, exactly the
// later changes its selector matches (a patch of a pod on the node, a pod created there, a delete);
// a watch without a version starts with an ADDED per current object; a version from the future is
// 410 Gone; Close ends the stream.
func TestWatchDeliversEvents(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	pods := kube.CoreV1().Pods("")
	list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patch := []byte(`{"metadata":{"annotations":{"k":"v2"}}}`)
	if _, err := kube.CoreV1().Pods("default").Patch(ctx, "a1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("default").Patch(ctx, "b1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPod(pod("default", "a3", "node-a", nil)); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Pods("other").Delete(ctx, "a2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"MODIFIED default/a1 k=v2", "ADDED default/a3 k=", "DELETED other/a2 k="}
	for i, wnt := range want {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d events", i)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				t.Fatalf("event %d: %T %v", i, ev.Object, ev.Object)
			}
			if got := fmt.Sprintf("%s %s/%s k=%s", ev.Type, p.Namespace, p.Name, p.Annotations["k"]); got != wnt {
				t.Fatalf("event %d = %q, want %q", i, got, wnt)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %d (%s)", i, wnt)
		}
	}
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("unexpected event %s %v (b1 is on node-b)", ev.Type, ev.Object)
	case <-time.After(100 * time.Millisecond):
	}

	nw, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-nw.ResultChan():
		if n, ok := ev.Object.(*corev1.Node); ev.Type != "ADDED" || !ok || n.Name != "node-a" {
			t.Fatalf("first node event %s %v, want ADDED node-a", ev.Type, ev.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no initial ADDED for node-a")
	}
	_, err = pods.Watch(ctx, metav1.ListOptions{ResourceVersion: "999999"})
	if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch from a future version: %v, want 410", err)
	}
	s.Close()
	select {
	case _, ok := <-nw.ResultChan():
		if ok {
			t.Fatal("watch sent an event after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch still open after Close")
	}
	nw.Stop()
}

// TestInformer: a client-go informer (list, then watch from the list's version) on the pods of a
// node sees a pod created and an annotation patched after it synced.
func TestInformer(t *testing.T) {
	s, kube := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=node-a"
	}))
	inf := f.Core().V1().Pods().Informer()
	seen := make(chan string, 16)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { seen <- "add " + o.(*corev1.Pod).Name },
		UpdateFunc: func(_, o any) {
			seen <- "update " + o.(*corev1.Pod).Name + " " + o.(*corev1.Pod).Annotations["phase"]
		},
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if err := s.AddPod(pod("default", "late", "node-a", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("default").Patch(ctx, "late", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"phase":"success"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for !got["add late"] || !got["update late success"] {
		select {
		case e := <-seen:
			got[e] = true
		case <-deadline:
			t.Fatalf("informer saw %v, want add late and update late success", got)
		}
	}
	if got["add b1"] {
		t.Fatal("informer saw b1 of node-b")
	}
}
