package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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

// watched is what a watch needs of a resource (*resource[T] of resource.go).
type watched interface {
	resourceName() string
	// snapshot returns copies of every stored object, in key order. Caller holds mu.
	snapshot(s *Server) []runtime.Object
	// bookmarkAt is the BOOKMARK object ending a streamed list at resourceVersion rv.
	bookmarkAt(rv int64) runtime.Object
}

func (res *resource[T]) resourceName() string { return res.name }

func (res *resource[T]) snapshot(s *Server) []runtime.Object {
	store := res.store(s)
	out := make([]runtime.Object, 0, len(store))
	for _, key := range sortedKeys(store) {
		out = append(out, store[key].DeepCopyObject())
	}
	return out
}

func (res *resource[T]) bookmarkAt(rv int64) runtime.Object {
	return res.bookmark(metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(rv, 10),
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}})
}

// watchResource streams changes of res as a real API server does for ?watch=true: with
// resourceVersion N every change after N (a client-go informer lists, then watches from the list's
// version, so nothing between the two is lost); with none or "0", first a synthetic ADDED for every
// current object, then the changes. With sendInitialEvents=true (client-go's streaming list, on by
// default in recent releases) the synthetic ADDEDs are followed by the BOOKMARK that marks their end
// (annotation k8s.io/initial-events-end). It ends when the client leaves, the server closes, or
// timeoutSeconds pass.
func (s *Server) watchResource(w http.ResponseWriter, r *http.Request, res watched, match matcher) {
	q := r.URL.Query()
	start, ok := s.watchStart(w, q, res)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	ws := &watchStream{w: w, enc: json.NewEncoder(w), match: match}
	for _, o := range start.initial {
		if !ws.send(watch.Added, o) {
			return
		}
	}
	if start.streamList && !ws.send(watch.Bookmark, res.bookmarkAt(start.from)) {
		return
	}
	ws.flush()
	timeout := time.Hour
	if v, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && v > 0 {
		timeout = time.Duration(v) * time.Second
	}
	s.follow(r, ws, res.resourceName(), start.from, time.After(timeout))
}

// watchFrom is where a watch starts: after resourceVersion from, with initial objects first.
type watchFrom struct {
	from       int64
	initial    []runtime.Object // the synthetic ADDEDs
	streamList bool             // sendInitialEvents=true: a BOOKMARK after initial
}

// watchStart reads the watch's resourceVersion and sendInitialEvents; false after an error answer
// (400 for a bad version, 410 for one from the future).
func (s *Server) watchStart(w http.ResponseWriter, q url.Values, res watched) (watchFrom, bool) {
	rvParam := q.Get("resourceVersion")
	s.mu.Lock()
	defer s.mu.Unlock()
	current := s.rv
	start := watchFrom{streamList: q.Get("sendInitialEvents") == "true"}
	if start.streamList || rvParam == "" || rvParam == "0" {
		start.from, start.initial = current, res.snapshot(s)
		return start, true
	}
	v, err := strconv.ParseInt(rvParam, 10, 64)
	if err != nil || v < 0 {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("resourceVersion %q: want a number", rvParam))
		return start, false
	}
	if v > current {
		writeStatus(w, http.StatusGone, metav1.StatusReasonExpired,
			fmt.Sprintf("too large resource version: %d, current: %d", v, current))
		return start, false
	}
	start.from = v
	return start, true
}

// watchStream writes one watch's events.
type watchStream struct {
	w     http.ResponseWriter
	enc   *json.Encoder
	match matcher
}

// send writes one event unless match rejects its object (a BOOKMARK always goes); false when the
// client is gone.
func (ws *watchStream) send(typ watch.EventType, obj runtime.Object) bool {
	if typ != watch.Bookmark && !ws.match(obj) {
		return true
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return false
	}
	return ws.enc.Encode(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}) == nil
}

func (ws *watchStream) flush() {
	if f, ok := ws.w.(http.Flusher); ok {
		f.Flush()
	}
}

// follow sends every change of resource after from as it is recorded, until the client leaves,
// the server closes or deadline fires.
func (s *Server) follow(r *http.Request, ws *watchStream, resource string, from int64, deadline <-chan time.Time) {
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
			if !ws.send(c.typ, c.obj) {
				return
			}
		}
		ws.flush()
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
