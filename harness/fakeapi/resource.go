package fakeapi

import (
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// object is what the server stores: a pod or a node.
type object interface {
	*corev1.Pod | *corev1.Node
	metav1.Object
	runtime.Object
}

// resource describes one served resource; pods and nodes share every handler through it, and
// differ only in what is written here.
type resource[T object] struct {
	name     string // "pods": the path segment, the watch history's and the Status details' kind
	singular string // "pod": in messages
	// namespaced resources are stored under "namespace/name", the others under their name.
	namespaced bool
	// create and remove say whether POST on a namespace's collection and DELETE are served.
	create, remove bool
	itemVerbs      string // the verbs on one object, for the 405 message
	store          func(*Server) map[string]T
	new            func() T                   // an empty object, to decode a body into
	meta           func(T) *metav1.ObjectMeta // what PATCH edits and the server stamps
	fields         func(T) fields.Set         // the field selectors served, with the object's values
	list           func(rv string, items []T) runtime.Object
	bookmark       func(meta metav1.ObjectMeta) T // the object of a BOOKMARK event
}

var podResource = &resource[*corev1.Pod]{
	name: "pods", singular: "pod", namespaced: true, create: true, remove: true, itemVerbs: "GET, PATCH, DELETE",
	store: func(s *Server) map[string]*corev1.Pod { return s.pods },
	new:   func() *corev1.Pod { return &corev1.Pod{} },
	meta:  func(p *corev1.Pod) *metav1.ObjectMeta { return &p.ObjectMeta },
	fields: func(p *corev1.Pod) fields.Set {
		return fields.Set{
			"metadata.name": p.Name, "metadata.namespace": p.Namespace,
			"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase),
		}
	},
	list: func(rv string, items []*corev1.Pod) runtime.Object {
		return &corev1.PodList{TypeMeta: listType("PodList"), ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: values(items)}
	},
	bookmark: func(meta metav1.ObjectMeta) *corev1.Pod { return withKind(&corev1.Pod{ObjectMeta: meta}) },
}

var nodeResource = &resource[*corev1.Node]{
	name: "nodes", singular: "node", itemVerbs: "GET, PATCH",
	store:  func(s *Server) map[string]*corev1.Node { return s.nodes },
	new:    func() *corev1.Node { return &corev1.Node{} },
	meta:   func(n *corev1.Node) *metav1.ObjectMeta { return &n.ObjectMeta },
	fields: func(n *corev1.Node) fields.Set { return fields.Set{"metadata.name": n.Name} },
	list: func(rv string, items []*corev1.Node) runtime.Object {
		return &corev1.NodeList{TypeMeta: listType("NodeList"), ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: values(items)}
	},
	bookmark: func(meta metav1.ObjectMeta) *corev1.Node { return withKind(&corev1.Node{ObjectMeta: meta}) },
}

func listType(kind string) metav1.TypeMeta { return metav1.TypeMeta{Kind: kind, APIVersion: "v1"} }

// values are the objects items point to, as a list's Items holds them (nil for none).
func values[E any](items []*E) []E {
	var out []E
	for _, p := range items {
		out = append(out, *p)
	}
	return out
}

func (res *resource[T]) key(ns, name string) string {
	if res.namespaced {
		return ns + "/" + name
	}
	return name
}

// add stores o (already a copy the server owns), stamped, and records it for watches.
func add[T object](s *Server, res *resource[T], o T) (T, error) {
	var none T
	if o.GetName() == "" {
		return none, fmt.Errorf("fakeapi: %s has no name", res.singular)
	}
	if res.namespaced && o.GetNamespace() == "" {
		o.SetNamespace(metav1.NamespaceDefault)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := res.key(o.GetNamespace(), o.GetName())
	store := res.store(s)
	if _, ok := store[key]; ok {
		return none, fmt.Errorf("fakeapi: %s %s exists", res.singular, key)
	}
	withKind(o)
	s.stamp(res.meta(o))
	store[key] = o
	s.record(watch.Added, res.name, o)
	return o.DeepCopyObject().(T), nil
}

// get returns a copy of the stored object.
func get[T object](s *Server, res *resource[T], key string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := res.store(s)[key]
	if !ok {
		var none T
		return none, false
	}
	return o.DeepCopyObject().(T), true
}

// serveCollection answers a resource's list: GET lists or watches (?watch=true) with field and label
// selectors; POST in a namespace creates where the resource allows it.
func serveCollection[T object](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T], ns string) {
	switch {
	case r.Method == http.MethodGet:
	case r.Method == http.MethodPost && res.create && ns == "":
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "create "+res.name+" in a namespace")
		return
	case r.Method == http.MethodPost && res.create:
		createFromBody(s, w, r, res, ns)
		return
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" on "+res.name)
		return
	}
	match, ok := selector(w, r, res, ns)
	if !ok {
		return
	}
	if isWatch(r.URL.Query().Get("watch")) {
		s.watchResource(w, r, res, func(o runtime.Object) bool { return match(o.(T)) })
		return
	}
	s.mu.Lock()
	store := res.store(s)
	var items []T
	for _, key := range sortedKeys(store) {
		if match(store[key]) {
			items = append(items, store[key].DeepCopyObject().(T))
		}
	}
	list := res.list(strconv.FormatInt(s.rv, 10), items)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// selector parses a list's fieldSelector (only the resource's fields) and labelSelector, and
// returns what selects an object of namespace ns ("": every namespace); false after a 400.
func selector[T object](w http.ResponseWriter, r *http.Request, res *resource[T], ns string) (func(T) bool, bool) {
	q := r.URL.Query()
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "fieldSelector: "+err.Error())
		return nil, false
	}
	served := res.fields(res.new())
	for _, req := range fsel.Requirements() {
		if _, ok := served[req.Field]; !ok {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("field label not supported: %s", req.Field))
			return nil, false
		}
	}
	lsel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "labelSelector: "+err.Error())
		return nil, false
	}
	return func(o T) bool {
		return (ns == "" || o.GetNamespace() == ns) && fsel.Matches(res.fields(o)) && lsel.Matches(labels.Set(o.GetLabels()))
	}, true
}

// createFromBody answers POST on a namespace's collection.
func createFromBody[T object](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T], ns string) {
	o := res.new()
	if !readObject(w, r, o) {
		return
	}
	if o.GetNamespace() != "" && o.GetNamespace() != ns {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the object does not match the namespace on the request")
		return
	}
	o.SetNamespace(ns)
	out, err := add(s, res, o)
	if err != nil {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// serveItem answers GET, PATCH (annotations and labels only) and, where the resource allows it,
// DELETE on one object.
func serveItem[T object](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T], ns, name string) {
	key := res.key(ns, name)
	notFound := func() {
		writeStatusDetails(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("%s %q not found", res.name, name), &metav1.StatusDetails{Name: name, Kind: res.name})
	}
	switch {
	case r.Method == http.MethodGet:
		o, ok := get(s, res, key)
		if !ok {
			notFound()
			return
		}
		writeJSON(w, http.StatusOK, o)
	case r.Method == http.MethodDelete && res.remove:
		s.mu.Lock()
		o, ok := res.store(s)[key]
		if ok {
			delete(res.store(s), key)
			s.stamp(res.meta(o))
			s.record(watch.Deleted, res.name, o)
		}
		s.mu.Unlock()
		if !ok {
			notFound()
			return
		}
		writeJSON(w, http.StatusOK, o)
	case r.Method == http.MethodPatch:
		patch(s, w, r, res, key, notFound)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("fakeapi: %s on a %s is not served (%s are)", r.Method, res.singular, res.itemVerbs))
	}
}

// patch applies a PATCH to the object at key and stores the result as a new version.
func patch[T object](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T], key string, notFound func()) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := res.store(s)[key]
	if !ok {
		notFound()
		return
	}
	n := o.DeepCopyObject().(T)
	if code, reason, msg := applyPatch(r.Header.Get("Content-Type"), body, res.meta(n)); code != 0 {
		writeStatus(w, code, reason, msg)
		return
	}
	s.stamp(res.meta(n))
	res.store(s)[key] = n
	s.record(watch.Modified, res.name, n)
	writeJSON(w, http.StatusOK, n)
}

func isWatch(v string) bool { return v == "true" || v == "1" }
