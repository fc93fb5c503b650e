// Package monitor keeps the host side of allocations tidy and observable:
// it removes the cache directory and .limits file of pods that are gone,
// sweeps crash debris (temporary files of an interrupted write), and exports
// per-container usage and limits as Prometheus metrics.
package monitor

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// PodRef identifies a pod. UID is empty when the source does not know it
// (kubelet's pod-resources API reports namespace and name only).
type PodRef struct {
	UID       types.UID
	Namespace string
	Name      string
}

// PodLister lists the pods the API server has on this node.
type PodLister interface {
	ListPods(ctx context.Context) ([]PodRef, error)
}

// PodResourcesLister lists the pods kubelet holds resources for (kubelet's
// pod-resources API). It sees pods the API server may already have
// forgotten, e.g. after a forced deletion while containers still run.
type PodResourcesLister interface {
	ListPods(ctx context.Context) ([]PodRef, error)
}

// Liveness is a snapshot answer to "may this pod UID still run?".
type Liveness struct {
	uids map[types.UID]bool
	// unresolved is set when kubelet runs a pod the API server does not
	// know: its UID, and so its directory, cannot be identified, so no
	// unknown UID may be treated as dead in this sweep.
	unresolved bool
}

// Alive reports whether uid may still have running containers.
func (l Liveness) Alive(uid types.UID) bool { return l.unresolved || l.uids[uid] }

// Snapshot asks both sources. An error from either means "don't know", and
// the caller must not delete anything.
func Snapshot(ctx context.Context, api PodLister, kubelet PodResourcesLister) (Liveness, error) {
	l := Liveness{uids: map[types.UID]bool{}}
	apiPods, err := api.ListPods(ctx)
	if err != nil {
		return Liveness{}, fmt.Errorf("list pods from the API server: %w", err)
	}
	byName := map[string]bool{}
	for _, p := range apiPods {
		l.uids[p.UID] = true
		byName[p.Namespace+"/"+p.Name] = true
	}
	if kubelet == nil {
		return l, nil
	}
	kPods, err := kubelet.ListPods(ctx)
	if err != nil {
		return Liveness{}, fmt.Errorf("list pods from kubelet pod-resources: %w", err)
	}
	for _, p := range kPods {
		if p.UID != "" {
			l.uids[p.UID] = true
		}
		if !byName[p.Namespace+"/"+p.Name] {
			l.unresolved = true
		}
	}
	return l, nil
}
