package fakeapi

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// SetContainerID records that container of pod namespace/name runs as the runtime's containerID
// ("docker://<id>", "containerd://<id>"), as the kubelet writes it into the pod's status once the
// container started: what a node agent maps a process's cgroup to. Watches see the change.
func (s *Server) SetContainerID(namespace, name, container, containerID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[namespace+"/"+name]
	if !ok {
		return fmt.Errorf("fakeapi: no pod %s/%s", namespace, name)
	}
	st := corev1.ContainerStatus{Name: container, ContainerID: containerID, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	replaced := false
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			p.Status.ContainerStatuses[i], replaced = st, true
		}
	}
	if !replaced {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, st)
	}
	p.Status.Phase = corev1.PodRunning
	s.stamp(&p.ObjectMeta)
	s.record(watch.Modified, "pods", p)
	return nil
}

// listEvents answers GET /api/v1/namespaces/{ns}/events: every event created in ns.
func (s *Server) listEvents(w http.ResponseWriter, ns string) {
	s.mu.Lock()
	list := &corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(s.rv)}}
	for _, ev := range s.events {
		if ev.Namespace == ns {
			list.Items = append(list.Items, ev)
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}
