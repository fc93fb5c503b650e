// Package fakeapi is a minimal Kubernetes API server over HTTP for driving a device plugin binary
// outside a cluster: exactly what a plugin needs for pod lookup and annotation patches, backed by an
// in-memory store the harness seeds.
//
// It serves, on a free loopback port, without authentication:
//
//   - discovery: GET /version, /api, /api/v1, /apis (client-go's discovery and version checks);
//   - pods: GET /api/v1/pods and /api/v1/namespaces/{ns}/pods (fieldSelector on metadata.name,
//     metadata.namespace, spec.nodeName, status.phase; labelSelector); POST (create) in a
//     namespace; GET, PATCH and DELETE /api/v1/namespaces/{ns}/pods/{name};
//   - nodes: GET /api/v1/nodes (fieldSelector metadata.name) and /api/v1/nodes/{name}, PATCH
//     /api/v1/nodes/{name} (HAMi's plugin writes its device registration into a node annotation and
//     releases the scheduler's hami.io/mutex.lock with a resourceVersion in the patch);
//   - watches: ?watch=true on the pod and node lists streams ADDED, MODIFIED and DELETED events from
//     the given resourceVersion (see watchResource), so client-go informers work;
//   - events: POST /api/v1/namespaces/{ns}/events (recorded, see Events) and GET (the namespace's
//     list); PATCH answers 404 so that client-go's recorder creates a new event instead;
//   - pod status: set by the harness as the kubelet would (SetContainerID), not over HTTP.
//
// PATCH accepts application/merge-patch+json, application/strategic-merge-patch+json (identical to a
// merge patch for the maps it may touch) and application/json-patch+json, and may change only
// metadata.annotations and metadata.labels (422 otherwise); other content types get 415. Every other
// path or verb gets 404 or 405 as a metav1.Status, as a real API server answers.
package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// Server is a running fake API server.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:PORT).
	URL string

	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	rv     int64
	pods   map[string]*corev1.Pod // namespace/name
	nodes  map[string]*corev1.Node
	events []corev1.Event
	log    []string
	// history is every change since Start, for watches; changed is closed (and replaced) on each.
	history []change
	changed chan struct{}
}

// Start listens on a free loopback port and serves until Close.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeapi: listen: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln, done: make(chan struct{}),
		pods: map[string]*corev1.Pod{}, nodes: map[string]*corev1.Node{}, changed: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, ending open watches.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		_ = s.srv.Close()
	})
}

// AddPod stores a copy of pod (namespace "default" when empty; a UID and creation time are filled
// in when missing). It fails when the pod exists.
func (s *Server) AddPod(pod *corev1.Pod) error {
	_, err := s.createPod(pod.DeepCopy())
	return err
}

// Pod returns a copy of the stored pod.
func (s *Server) Pod(namespace, name string) (*corev1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[namespace+"/"+name]
	if !ok {
		return nil, false
	}
	return p.DeepCopy(), true
}

// AddNode stores a copy of node.
func (s *Server) AddNode(node *corev1.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[node.Name]; ok {
		return fmt.Errorf("fakeapi: node %s exists", node.Name)
	}
	n := withKind(node.DeepCopy())
	s.stamp(&n.ObjectMeta)
	s.nodes[n.Name] = n
	s.record(watch.Added, "nodes", n)
	return nil
}

// Node returns a copy of the stored node.
func (s *Server) Node(name string) (*corev1.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return nil, false
	}
	return n.DeepCopy(), true
}

// Events returns the events clients have created.
func (s *Server) Events() []corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]corev1.Event(nil), s.events...)
}

// Requests returns "METHOD PATH?QUERY STATUS" for every request served so far, for diagnostics.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// stamp fills in what the API server owns. Caller holds mu.
func (s *Server) stamp(m *metav1.ObjectMeta) {
	s.rv++
	m.ResourceVersion = strconv.FormatInt(s.rv, 10)
	if m.UID == "" {
		m.UID = uuid.NewUUID()
	}
	if m.CreationTimestamp.IsZero() {
		m.CreationTimestamp = metav1.Now()
	}
}

func (s *Server) createPod(p *corev1.Pod) (*corev1.Pod, error) {
	if p.Name == "" {
		return nil, errors.New("fakeapi: pod has no name")
	}
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	if _, ok := s.pods[key]; ok {
		return nil, fmt.Errorf("fakeapi: pod %s exists", key)
	}
	s.stamp(&p.ObjectMeta)
	withKind(p)
	s.pods[key] = p
	s.record(watch.Added, "pods", p)
	return p.DeepCopy(), nil
}

// recorder captures the status code for the request log.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	s.route(rec, r)
	line := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		line += "?" + r.URL.RawQuery
	}
	s.mu.Lock()
	s.log = append(s.log, fmt.Sprintf("%s %d", line, rec.code))
	s.mu.Unlock()
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	get := r.Method == http.MethodGet
	switch {
	case r.URL.Path == "/version" && get:
		writeJSON(w, http.StatusOK, version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.0-limitbed-fakeapi",
			Platform: "linux/amd64"})
	case r.URL.Path == "/api" && get:
		writeJSON(w, http.StatusOK, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
	case r.URL.Path == "/apis" && get:
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}})
	case r.URL.Path == "/api/v1" && get:
		writeJSON(w, http.StatusOK, resources())
	case len(seg) == 3 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "pods":
		s.podCollection(w, r, "")
	case len(seg) == 5 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "pods":
		s.podCollection(w, r, seg[3])
	case len(seg) == 6 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "pods":
		s.pod(w, r, seg[3], seg[5])
	case len(seg) == 3 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "nodes":
		s.nodeCollection(w, r)
	case len(seg) == 4 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "nodes":
		s.node(w, r, seg[3])
	case len(seg) >= 5 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "events":
		s.event(w, r, seg[3], len(seg) == 6)
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("fakeapi serves pods, nodes and events of /api/v1 only; no %s %s", r.Method, r.URL.Path))
	}
}

func resources() *metav1.APIResourceList {
	rw := metav1.Verbs{"create", "delete", "get", "list", "patch", "watch"}
	return &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{
			{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", Verbs: rw, ShortNames: []string{"po"}},
			{Name: "nodes", SingularName: "node", Namespaced: false, Kind: "Node",
				Verbs: metav1.Verbs{"get", "list", "patch", "watch"}, ShortNames: []string{"no"}},
			{Name: "events", SingularName: "event", Namespaced: true, Kind: "Event", Verbs: metav1.Verbs{"create"},
				ShortNames: []string{"ev"}},
		},
	}
}

// podFields are the field selectors the pods resource supports here.
func podFields(p *corev1.Pod) fields.Set {
	return fields.Set{
		"metadata.name": p.Name, "metadata.namespace": p.Namespace,
		"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase),
	}
}

func (s *Server) podCollection(w http.ResponseWriter, r *http.Request, ns string) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		if ns == "" {
			writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "create pods in a namespace")
			return
		}
		var p corev1.Pod
		if !readObject(w, r, &p) {
			return
		}
		if p.Namespace != "" && p.Namespace != ns {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the object does not match the namespace on the request")
			return
		}
		p.Namespace = ns
		out, err := s.createPod(&p)
		if err != nil {
			writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, err.Error())
			return
		}
		writeJSON(w, http.StatusCreated, out)
		return
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" on a pod collection")
		return
	}
	q := r.URL.Query()
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "fieldSelector: "+err.Error())
		return
	}
	for _, req := range fsel.Requirements() {
		if _, ok := podFields(&corev1.Pod{})[req.Field]; !ok {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("field label not supported: %s", req.Field))
			return
		}
	}
	lsel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "labelSelector: "+err.Error())
		return
	}
	if isWatch(q.Get("watch")) {
		s.watchResource(w, r, "pods", func(o runtime.Object) bool {
			p := o.(*corev1.Pod)
			return (ns == "" || p.Namespace == ns) && fsel.Matches(podFields(p)) && lsel.Matches(labels.Set(p.Labels))
		})
		return
	}
	s.mu.Lock()
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	for _, p := range s.pods {
		if (ns == "" || p.Namespace == ns) && fsel.Matches(podFields(p)) && lsel.Matches(labels.Set(p.Labels)) {
			list.Items = append(list.Items, *p.DeepCopy())
		}
	}
	s.mu.Unlock()
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	writeJSON(w, http.StatusOK, list)
}

func isWatch(v string) bool { return v == "true" || v == "1" }

func (s *Server) pod(w http.ResponseWriter, r *http.Request, ns, name string) {
	key := ns + "/" + name
	notFound := func() {
		writeStatusDetails(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("pods %q not found", name), &metav1.StatusDetails{Name: name, Kind: "pods"})
	}
	switch r.Method {
	case http.MethodGet:
		p, ok := s.Pod(ns, name)
		if !ok {
			notFound()
			return
		}
		writeJSON(w, http.StatusOK, p)
	case http.MethodDelete:
		s.mu.Lock()
		p, ok := s.pods[key]
		if ok {
			delete(s.pods, key)
			s.stamp(&p.ObjectMeta)
			s.record(watch.Deleted, "pods", p)
		}
		s.mu.Unlock()
		if !ok {
			notFound()
			return
		}
		writeJSON(w, http.StatusOK, p)
	case http.MethodPatch:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ok := s.pods[key]
		if !ok {
			notFound()
			return
		}
		np := p.DeepCopy()
		if code, reason, msg := applyPatch(r.Header.Get("Content-Type"), body, &np.ObjectMeta); code != 0 {
			writeStatus(w, code, reason, msg)
			return
		}
		s.stamp(&np.ObjectMeta)
		s.pods[key] = np
		s.record(watch.Modified, "pods", np)
		writeJSON(w, http.StatusOK, np)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("fakeapi: %s on a pod is not served (GET, PATCH, DELETE are)", r.Method))
	}
}

func (s *Server) nodeCollection(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" on nodes")
		return
	}
	q := r.URL.Query()
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "fieldSelector: "+err.Error())
		return
	}
	for _, req := range fsel.Requirements() {
		if req.Field != "metadata.name" {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("field label not supported: %s", req.Field))
			return
		}
	}
	lsel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "labelSelector: "+err.Error())
		return
	}
	match := func(o runtime.Object) bool {
		n := o.(*corev1.Node)
		return fsel.Matches(fields.Set{"metadata.name": n.Name}) && lsel.Matches(labels.Set(n.Labels))
	}
	if isWatch(q.Get("watch")) {
		s.watchResource(w, r, "nodes", match)
		return
	}
	s.mu.Lock()
	list := &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	for _, n := range s.nodes {
		if match(n) {
			list.Items = append(list.Items, *n.DeepCopy())
		}
	}
	s.mu.Unlock()
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) node(w http.ResponseWriter, r *http.Request, name string) {
	notFound := func() {
		writeStatusDetails(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("nodes %q not found", name), &metav1.StatusDetails{Name: name, Kind: "nodes"})
	}
	switch r.Method {
	case http.MethodGet:
		n, ok := s.Node(name)
		if !ok {
			notFound()
			return
		}
		writeJSON(w, http.StatusOK, n)
	case http.MethodPatch:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n, ok := s.nodes[name]
		if !ok {
			notFound()
			return
		}
		nn := n.DeepCopy()
		if code, reason, msg := applyPatch(r.Header.Get("Content-Type"), body, &nn.ObjectMeta); code != 0 {
			writeStatus(w, code, reason, msg)
			return
		}
		s.stamp(&nn.ObjectMeta)
		s.nodes[name] = nn
		s.record(watch.Modified, "nodes", nn)
		writeJSON(w, http.StatusOK, nn)
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("fakeapi: %s on a node is not served (GET, PATCH are)", r.Method))
	}
}

func (s *Server) event(w http.ResponseWriter, r *http.Request, ns string, named bool) {
	switch {
	case r.Method == http.MethodPost && !named:
		var ev corev1.Event
		if !readObject(w, r, &ev) {
			return
		}
		ev.Namespace = ns
		s.mu.Lock()
		s.stamp(&ev.ObjectMeta)
		s.events = append(s.events, ev)
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, &ev)
	case r.Method == http.MethodGet && !named:
		s.listEvents(w, ns)
	case r.Method == http.MethodPatch && named:
		// client-go's recorder patches an aggregated event; not found makes it create a new one.
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "fakeapi keeps events write-once")
	default:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method+" on events")
	}
}

func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(strings.ToLower(mt))
}

const maxBody = 4 << 20

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("read body: %v (limit %d bytes)", err, maxBody))
		return nil, false
	}
	return body, true
}

// readObject decodes a request body into obj: JSON or protobuf (client-go's clientsets send
// built-in types as protobuf); other media types get 415.
func readObject(w http.ResponseWriter, r *http.Request, obj runtime.Object) bool {
	switch ct := mediaType(r.Header.Get("Content-Type")); ct {
	case "", runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
	default:
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("fakeapi: the body of the request was in an unknown format - accepted media types are %s and %s; got %q",
				runtime.ContentTypeJSON, runtime.ContentTypeProtobuf, ct))
		return false
	}
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, obj); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decode body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		data, _ = json.Marshal(status(code, metav1.StatusReasonInternalError, err.Error(), nil))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

func status(code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: msg, Details: details}
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeStatusDetails(w, code, reason, msg, nil)
}

func writeStatusDetails(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, d *metav1.StatusDetails) {
	writeJSON(w, code, status(code, reason, msg, d))
}
