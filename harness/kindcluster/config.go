package kindcluster

import (
	"strconv"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
)

// Worker is one worker node of the cluster. kind names workers <cluster>-worker, <cluster>-worker2, …
type Worker struct {
	Labels map[string]string
	Mounts []Mount
}

// Mount is a host directory mounted into a node (kind's extraMounts).
type Mount struct {
	HostPath      string
	ContainerPath string
}

// cgroupV1Patch lets Kubernetes ≥ 1.35's kubelet start on a cgroup v1 host.
const cgroupV1Patch = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
`

// kindConfig renders the cluster: one control plane, the workers, and the kubelet patch where the
// host runs cgroup v1. The offline image has no kindnetd: its nodes configure a bridge CNI
// themselves, and kind's default CNI manifest in that image only records that.
func kindConfig(image NodeImage, workers []Worker, cgroupV1 bool) *v1alpha4.Cluster {
	cfg := &v1alpha4.Cluster{TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"}}
	cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: v1alpha4.ControlPlaneRole, Image: image.Ref})
	for _, w := range workers {
		n := v1alpha4.Node{Role: v1alpha4.WorkerRole, Image: image.Ref, Labels: w.Labels}
		for _, m := range w.Mounts {
			n.ExtraMounts = append(n.ExtraMounts, v1alpha4.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath})
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	if cgroupV1 {
		cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches, cgroupV1Patch)
	}
	v1alpha4.SetDefaultsCluster(cfg)
	return cfg
}

// hostCgroupV1 reports whether /sys/fs/cgroup is not a cgroup2 mount.
func hostCgroupV1() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false
	}
	return st.Type != unix.CGROUP2_SUPER_MAGIC
}

// workerName is kind's name for the i-th worker (0-based).
func workerName(cluster string, i int) string {
	if i == 0 {
		return cluster + "-worker"
	}
	return cluster + "-worker" + strconv.Itoa(i+1)
}
