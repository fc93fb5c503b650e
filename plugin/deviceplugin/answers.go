package deviceplugin

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/limitbed/limitbed/plugin/pods"
)

// The claim of a placement entry and the answer to the kubelet are one step for a retry. The
// claim (pods.Client.Claim) empties the entry and, on the last one, sets bind-phase=success; the
// answer then travels to the kubelet. A kubelet that restarts in between never receives it, and
// asks again for the same container with the same devices: the entry is gone, the pod done and
// the lock released, so the call used to be refused and the pod failed admission. The plugin
// therefore keeps every answer it gave after a claim, by pod UID and container, with the kubelet's
// device IDs, until that container has started or its pod is gone: a call asking for exactly
// those devices again gets the same answer, and nothing is claimed twice.
//
// The kubelet's call names no pod, so the answer is given only where no other pod can be behind
// the call: the devices are the ones the kubelet gave that container (it hands them to no other
// container while it holds that allocation; it asks for them again only once it lost it), the
// container has not started, and no other pod is being allocated (the node lock names that pod,
// or none). While the lock names another pod the call may be that pod's, with the devices the
// kubelet took back: it is refused and nobody is marked.

// answerKey names a container of a pod.
type answerKey struct {
	uid       types.UID
	container string
}

// answer is what one container was handed after its claim.
type answer struct {
	pod  string   // namespace/name, for the log
	ids  []string // the kubelet's device IDs, sorted
	resp *pluginapi.ContainerAllocateResponse
}

// answers are the plugin's answers since their claims, by container.
type answers struct {
	mu sync.Mutex
	m  map[answerKey]*answer
}

// remember keeps the answers of a call whose claim stood.
func (a *answers) remember(pod *corev1.Pod, steps []step, resp *pluginapi.AllocateResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[answerKey]*answer{}
	}
	for i, s := range steps {
		if s.req.Container == nil || i >= len(resp.ContainerResponses) {
			continue // a MIG device: no entry was claimed
		}
		a.m[answerKey{pod.UID, s.req.Container.Name}] = &answer{pod: pod.Namespace + "/" + pod.Name, ids: sortedIDs(s.req.DeviceIDs),
			resp: proto.Clone(resp.ContainerResponses[i]).(*pluginapi.ContainerAllocateResponse)}
	}
}

func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// retry returns the answers given before for a call that asks again for the devices some
// containers were handed after their claims (ok), or an error when the call cannot be told apart
// from another pod's. ok is false when the call is not a retry. Answers of containers that have
// started, or of pods no longer allocated on the node (pl.Answered), are forgotten first.
func (a *answers) retry(reqs []request, pl pods.Placement, log klog.Logger) (resp *pluginapi.AllocateResponse, ok bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(pl.Answered)
	var found []answerKey
	for _, r := range reqs {
		ids := sortedIDs(r.ids)
		for k, ans := range a.m {
			if slices.Equal(ans.ids, ids) && !slices.Contains(found, k) {
				found = append(found, k)
				break
			}
		}
	}
	if len(found) == 0 {
		return nil, false, nil
	}
	uid := found[0].uid
	if len(found) != len(reqs) || slices.ContainsFunc(found, func(k answerKey) bool { return k.uid != uid }) {
		return nil, true, fmt.Errorf("refused: the kubelet asks for devices handed to %s together with others; nothing is claimed twice", a.names(found))
	}
	if pl.Pod != nil && pl.Pod.UID != uid {
		return nil, true, fmt.Errorf("refused: the kubelet asks again for the devices handed to %s after their claim, while the node lock names pod %s/%s: the call may be either pod's; nobody is marked",
			a.names(found), pl.Pod.Namespace, pl.Pod.Name)
	}
	resp = &pluginapi.AllocateResponse{}
	for _, k := range found {
		resp.ContainerResponses = append(resp.ContainerResponses, proto.Clone(a.m[k].resp).(*pluginapi.ContainerAllocateResponse))
		log.Info("Allocate asked again after the claim (a kubelet restart): the same answer", "pod", a.m[k].pod, "container", k.container,
			"devices", a.m[k].ids)
	}
	return resp, true, nil
}

func (a *answers) names(keys []answerKey) string {
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("pod %s container %s", a.m[k].pod, k.container))
	}
	return strings.Join(out, ", ")
}

// forget drops the answers of containers that started and of pods not in allocated.
func (a *answers) forget(allocated []*corev1.Pod) {
	byUID := map[types.UID]*corev1.Pod{}
	for _, p := range allocated {
		byUID[p.UID] = p
	}
	for k := range a.m {
		if p := byUID[k.uid]; p == nil || started(p, k.container) {
			delete(a.m, k)
		}
	}
}

// started reports whether the kubelet created container name of p (its status has an ID).
func started(p *corev1.Pod, name string) bool {
	for _, ss := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range ss {
			if s.Name == name && s.ContainerID != "" {
				return true
			}
		}
	}
	return false
}
