package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// change is one entry of the server's history: what a watch from an older resourceVersion replays.
type change struct {
	rv       int64
	typ      watch.EventType
	resource string // "pods" or "nodes"
	obj      runtime.Object
}

// record appends a change and wakes the watches. Caller holds mu; obj is copied.
func (s *Server) record(typ watch.EventType, resource string, obj runtime.Object) {
	s.history = append(s.history, change{rv: s.rv, typ: typ, resource: resource, obj: obj.DeepCopyObject()})
	close(s.changed)
	s.changed = make(chan struct{})
}

// matcher selects the objects a watch delivers.
type matcher func(runtime.Object) bool

// watchResource streams changes of resource as a real API server does for ?watch=true: with
// resourceVersion N every change after N (a client-go informer lists, then watches from the list's
// version, so nothing between the two is lost); with none or "0", first a synthetic ADDED for every
// current object, then the changes. With sendInitialEvents=true (client-go's streaming list, on by
// default in recent releases) the synthetic ADDEDs are followed by the BOOKMARK that marks their end
// (annotation k8s.io/initial-events-end). It ends when the client leaves, the server closes, or
// timeoutSeconds pass.
func (s *Server) watchResource(w http.ResponseWriter, r *http.Request, resource string, match matcher) {
	q := r.URL.Query()
	var from int64
	rvParam := q.Get("resourceVersion")
	s.mu.Lock()
	current := s.rv
	var initial []runtime.Object
	streamList := q.Get("sendInitialEvents") == "true"
	switch {
	case streamList:
		from = current
		initial = s.objects(resource)
	case rvParam == "" || rvParam == "0":
		from = current
		initial = s.objects(resource)
	default:
		v, err := strconv.ParseInt(rvParam, 10, 64)
		if err != nil || v < 0 {
			s.mu.Unlock()
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("resourceVersion %q: want a number", rvParam))
			return
		}
		if v > current {
			s.mu.Unlock()
			writeStatus(w, http.StatusGone, metav1.StatusReasonExpired,
				fmt.Sprintf("too large resource version: %d, current: %d", v, current))
			return
		}
		from = v
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	enc := json.NewEncoder(w)
	send := func(typ watch.EventType, obj runtime.Object) bool {
		if typ != watch.Bookmark && !match(obj) {
			return true
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return false
		}
		return enc.Encode(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}) == nil
	}
	for _, o := range initial {
		if !send(watch.Added, o) {
			return
		}
	}
	if streamList && !send(watch.Bookmark, bookmark(resource, from)) {
		return
	}
	flush()

	timeout := time.Hour
	if v, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && v > 0 {
		timeout = time.Duration(v) * time.Second
	}
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		var batch []change
		for _, c := range s.history {
			if c.rv > from && c.resource == resource {
				batch = append(batch, c)
			}
		}
		if n := len(s.history); n > 0 && s.history[n-1].rv > from {
			from = s.history[n-1].rv
		}
		wake := s.changed
		s.mu.Unlock()
		for _, c := range batch {
			if !send(c.typ, c.obj) {
				return
			}
		}
		flush()
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-deadline:
			return
		}
	}
}

// objects returns copies of every stored object of resource, in name order. Caller holds mu.
func (s *Server) objects(resource string) []runtime.Object {
	var out []runtime.Object
	switch resource {
	case "pods":
		for _, key := range sortedKeys(s.pods) {
			out = append(out, s.pods[key].DeepCopy())
		}
	case "nodes":
		for _, key := range sortedKeys(s.nodes) {
			out = append(out, s.nodes[key].DeepCopy())
		}
	}
	return out
}

// bookmark is the BOOKMARK object ending a streamed list at resourceVersion rv.
func bookmark(resource string, rv int64) runtime.Object {
	meta := metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(rv, 10),
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}
	if resource == "nodes" {
		return withKind(&corev1.Node{ObjectMeta: meta})
	}
	return withKind(&corev1.Pod{ObjectMeta: meta})
}

func withKind[T interface{ *corev1.Pod | *corev1.Node }](o T) T {
	switch v := any(o).(type) {
	case *corev1.Pod:
		v.Kind, v.APIVersion = "Pod", "v1"
	case *corev1.Node:
		v.Kind, v.APIVersion = "Node", "v1"
	}
	return o
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
