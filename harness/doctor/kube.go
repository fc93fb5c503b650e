package doctor

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limitbed/limitbed/harness/kindcluster"
	"github.com/limitbed/limitbed/harness/sandbox"
)

// APICluster is a Cluster reached through an API server: exec as kubectl exec does
// (kindcluster.PodContainer), the pod proxy for /metrics.
type APICluster struct {
	kube kubernetes.Interface
	pods *kindcluster.Cluster
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
	return newAPICluster(cfg)
}

func newAPICluster(cfg *rest.Config) (*APICluster, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &APICluster{kube: kube, pods: &kindcluster.Cluster{Kube: kube, REST: cfg}}, nil
}

// Kube implements Cluster.
func (a *APICluster) Kube() kubernetes.Interface { return a.kube }

// Container implements Cluster.
func (a *APICluster) Container(ctx context.Context, ns, pod, container string) (sandbox.Container, error) {
	return a.pods.PodContainer(ctx, ns, pod, container)
}

// ProxyGet implements Cluster.
func (a *APICluster) ProxyGet(ctx context.Context, ns, pod, port, path string) ([]byte, error) {
	b, err := a.kube.CoreV1().Pods(ns).ProxyGet("http", pod, port, path, nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s port %s through the API server: %w", path, ns, pod, port, err)
	}
	return b, nil
}
