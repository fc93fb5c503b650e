package doctor

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/podexec"
)

// APICluster is a Cluster reached through an API server: exec as kubectl exec does (plugin/podexec,
// shared with the kind tier), the pod proxy for /metrics.
type APICluster struct {
	kube kubernetes.Interface
	rest *rest.Config
}

// NewAPICluster builds the client from kubeconfig, or, when it is empty, from client-go's default
// loading rules (KUBECONFIG, then ~/.kube/config), as kubectl does.
func NewAPICluster(kubeconfig string) (*APICluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config): %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &APICluster{kube: kube, rest: cfg}, nil
}

// Kube implements Cluster.
func (a *APICluster) Kube() kubernetes.Interface { return a.kube }

// Container implements Cluster.
func (a *APICluster) Container(_ context.Context, ns, pod, container string) (ctrexec.Container, error) {
	return &podContainer{a: a, ns: ns, pod: pod, ctr: container}, nil
}

// ProxyGet implements Cluster.
func (a *APICluster) ProxyGet(ctx context.Context, ns, pod, port, path string) ([]byte, error) {
	b, err := a.kube.CoreV1().Pods(ns).ProxyGet("http", pod, port, path, nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s port %s through the API server: %w", path, ns, pod, port, err)
	}
	return b, nil
}

// podContainer execs through the API server; it is a ctrexec.Container so that plugin/launch's
// methods (su -) run in it.
type podContainer struct {
	a            *APICluster
	ns, pod, ctr string
}

func (p *podContainer) Exec(ctx context.Context, cmd []string, opts ctrexec.ExecOptions) (ctrexec.ExecResult, error) {
	return podexec.Target{Kube: p.a.kube, REST: p.a.rest, Namespace: p.ns, Pod: p.pod, Container: p.ctr}.Exec(ctx, cmd, opts)
}

func (p *podContainer) ReadFile(ctx context.Context, path string) ([]byte, error) {
	b, found, err := read(ctx, p, path)
	if err == nil && !found {
		err = fmt.Errorf("read %s in %s: no such file", path, p)
	}
	return b, err
}

func (p *podContainer) Logs(ctx context.Context) ([]byte, error) {
	b, err := p.a.kube.CoreV1().Pods(p.ns).GetLogs(p.pod, &corev1.PodLogOptions{Container: p.ctr}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", p, err)
	}
	return b, nil
}

func (p *podContainer) Addr() string                  { return "" }
func (p *podContainer) Supports(ctrexec.Feature) bool { return false }
func (p *podContainer) Backend() string               { return "kubernetes" }
func (p *podContainer) String() string                { return p.ns + "/" + p.pod + "/" + p.ctr }

// Stop is refused: doctor never deletes what it inspects.
func (p *podContainer) Stop(context.Context) error {
	return fmt.Errorf("doctor does not stop %s", p)
}
