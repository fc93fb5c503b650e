// Package kube is the API-server plumbing both binaries share: the client
// (a kubeconfig or the in-cluster config) and an Event recorder.
package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/limitbed/limitbed/plugin/delivery"
)

// Client connects with kubeconfig, or with the in-cluster config when it is
// empty; every request it makes (an Event recorder's too) ends within timeout,
// so a silent API server never stalls a node component.
func Client(kubeconfig string, timeout time.Duration) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}

// EventRecorder records Events for pods as component; it stops with ctx.
func EventRecorder(ctx context.Context, kube kubernetes.Interface, component string) delivery.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
}
