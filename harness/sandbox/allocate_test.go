package sandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestFromAllocateResponse(t *testing.T) {
	t.Parallel()
	base := ContainerSpec{
		Name:   "c",
		Image:  WorkloadImage,
		Env:    map[string]string{"FROM_POD": "1", "CUDA_DEVICE_SM_LIMIT": "100"},
		Mounts: []Mount{{HostPath: "/data", ContainerPath: "/data"}},
	}
	cases := []struct {
		name string
		resp *pluginapi.ContainerAllocateResponse
		want ContainerSpec
	}{
		{
			name: "nil response keeps the base",
			resp: nil,
			want: ContainerSpec{Name: "c", Image: WorkloadImage, Env: base.Env, Mounts: base.Mounts},
		},
		{
			name: "envs, mounts with read-only flags and devices",
			resp: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_SM_LIMIT": "50"},
				Mounts: []*pluginapi.Mount{
					{ContainerPath: "/usr/local/vgpu/libvgpu.so", HostPath: "/h/libvgpu.so", ReadOnly: true},
					{ContainerPath: "/usr/local/vgpu", HostPath: "/h/containers/uid_c", ReadOnly: false},
					{ContainerPath: "/overrideEnv", HostPath: "/h/containers/uid_c.limits", ReadOnly: true},
				},
				Devices: []*pluginapi.DeviceSpec{{ContainerPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", Permissions: "rw"}},
			},
			want: ContainerSpec{
				Name:  "c",
				Image: WorkloadImage,
				// The pod spec's own value wins over the plugin's, as with the kubelet.
				Env: map[string]string{"FROM_POD": "1", "CUDA_DEVICE_SM_LIMIT": "100", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
				Mounts: []Mount{
					{HostPath: "/data", ContainerPath: "/data"},
					{HostPath: "/h/libvgpu.so", ContainerPath: "/usr/local/vgpu/libvgpu.so", ReadOnly: true},
					{HostPath: "/h/containers/uid_c", ContainerPath: "/usr/local/vgpu"},
					{HostPath: "/h/containers/uid_c.limits", ContainerPath: "/overrideEnv", ReadOnly: true},
				},
				Devices: []Device{{HostPath: "/dev/nvidia0", ContainerPath: "/dev/nvidia0", Permissions: "rw"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := FromAllocateResponse(base, tc.resp)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("FromAllocateResponse (-want +got):\n%s", diff)
			}
			if base.Env["CUDA_DEVICE_SM_LIMIT"] != "100" || len(base.Mounts) != 1 {
				t.Errorf("FromAllocateResponse modified its base: %+v", base)
			}
		})
	}
}
