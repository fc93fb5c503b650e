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
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/version"
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
	_, err := add(s, podResource, pod.DeepCopy())
	return err
}

// Pod returns a copy of the stored pod.
func (s *Server) Pod(namespace, name string) (*corev1.Pod, bool) {
	return get(s, podResource, namespace+"/"+name)
}

// AddNode stores a copy of node.
func (s *Server) AddNode(node *corev1.Node) error {
	_, err := add(s, nodeResource, node.DeepCopy())
	return err
}

// Node returns a copy of the stored node.
func (s *Server) Node(name string) (*corev1.Node, bool) {
	return get(s, nodeResource, name)
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
		serveCollection(s, w, r, podResource, "")
	case len(seg) == 5 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "pods":
		serveCollection(s, w, r, podResource, seg[3])
	case len(seg) == 6 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "namespaces" && seg[4] == "pods":
		serveItem(s, w, r, podResource, seg[3], seg[5])
	case len(seg) == 3 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "nodes":
		serveCollection(s, w, r, nodeResource, "")
	case len(seg) == 4 && seg[0] == "api" && seg[1] == "v1" && seg[2] == "nodes":
		serveItem(s, w, r, nodeResource, "", seg[3])
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
