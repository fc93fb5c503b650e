// Package delivery resolves limitDelivery for one pod: pod annotation, then
// node config, then global config, then the default (file).
//
// One rule is stricter than the design: a pod may choose "env" through its
// annotation only when the administrator allows it
// (nvidia.allowPodLimitDeliveryOverride). Env delivery leaves processes
// started from login sessions unlimited, so by default a pod owner cannot
// opt out of the file; the annotation is then ignored with a warning.
package delivery

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

// Source names the layer a decision came from.
type Source string

// Layers, highest precedence first.
const (
	SourcePodAnnotation Source = "pod annotation"
	SourceNodeConfig    Source = "node config"
	SourceGlobalConfig  Source = "global config"
	SourceDefault       Source = "default"
)

// Layers are the configured (non-pod) inputs.
type Layers struct {
	Node             *v1.LimitDelivery
	Global           *v1.LimitDelivery
	AllowPodOverride bool
}

// Decision is the resolved mode and where it came from.
type Decision struct {
	Mode   v1.LimitDelivery
	Source Source
	// Ignored is set when the pod asked for env but the admin gate is
	// closed; Mode then comes from the lower layers.
	Ignored bool
}

// Resolve returns the delivery mode for pod. An annotation value other than
// file|env is an error naming the pod and the annotation.
func Resolve(pod *corev1.Pod, l Layers) (Decision, error) {
	base := resolveLayers(l)
	raw, ok := pod.GetAnnotations()[annotations.LimitDelivery]
	if !ok {
		return base, nil
	}
	want := v1.LimitDelivery(raw)
	if !want.Valid() {
		return Decision{}, fmt.Errorf("pod %s/%s annotation %s: %q is not one of file|env",
			pod.Namespace, pod.Name, annotations.LimitDelivery, raw)
	}
	// Asking for what the node already does, or for the file, never needs
	// permission; only a downgrade to env does.
	if want == base.Mode || want == v1.LimitDeliveryFile || l.AllowPodOverride {
		return Decision{Mode: want, Source: SourcePodAnnotation}, nil
	}
	base.Ignored = true
	return base, nil
}

func resolveLayers(l Layers) Decision {
	switch {
	case l.Node != nil:
		return Decision{Mode: *l.Node, Source: SourceNodeConfig}
	case l.Global != nil:
		return Decision{Mode: *l.Global, Source: SourceGlobalConfig}
	default:
		return Decision{Mode: v1.DefaultLimitDelivery, Source: SourceDefault}
	}
}

// EventRecorder is the subset of client-go's record.EventRecorder used here.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// ReasonOverrideIgnored is the event reason for an ignored annotation.
const ReasonOverrideIgnored = "LimitDeliveryOverrideIgnored"

// ReportIgnored logs (and, with a recorder, records an event) when d
// ignored the pod's annotation. recorder may be nil.
func ReportIgnored(logger klog.Logger, recorder EventRecorder, pod *corev1.Pod, d Decision) {
	if !d.Ignored {
		return
	}
	msg := fmt.Sprintf("annotation %s=env ignored: pod overrides are not allowed on this cluster (nvidia.allowPodLimitDeliveryOverride); using %s from %s",
		annotations.LimitDelivery, d.Mode, d.Source)
	logger.Info("Warning: "+msg, "pod", klog.KObj(pod))
	if recorder != nil {
		recorder.Eventf(pod, corev1.EventTypeWarning, ReasonOverrideIgnored, "%s", msg)
	}
}
