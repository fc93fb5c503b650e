package fakeapi

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kubelet's part the harness plays: a container's runtime ID in the pod's status, seen by a
// client; and the events a node agent recorded, listed back through the API.
func TestContainerIDAndEventList(t *testing.T) {
	s, kube := start(t)
	ctx := context.Background()
	if err := s.SetContainerID("default", "a1", "main", "docker://abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetContainerID("default", "nope", "main", "docker://abc"); err == nil {
		t.Error("a status for a pod that does not exist")
	}
	p, err := kube.CoreV1().Pods("default").Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID != "docker://abc" || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("status %+v", p.Status)
	}
	for _, ns := range []string{"default", "other"} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-"}, Reason: "R-" + ns,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "a1"}}
		if _, err := kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Reason != "R-default" {
		t.Fatalf("events of default: %+v", list.Items)
	}
}
