package podrequest

import (
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/limitbed/limitbed/plugin/annotations"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
)

var hami = v1.Resolve(nil, nil, "n").Requests

// ctr builds a container whose limits are the given resources (name: value).
func ctr(limits map[string]string) *corev1.Container {
	c := &corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
	for k, v := range limits {
		c.Resources.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return c
}

// capacity: GPU-a and GPU-b have 16384 MiB each (as registered).
func capacity(uuid string) (int64, bool) {
	switch uuid {
	case "GPU-a", "GPU-b":
		return 16384, true
	}
	return 0, false
}

func dev(uuid string, mem, cores int32) annotations.ContainerDevice {
	return annotations.ContainerDevice{UUID: uuid, Type: "NVIDIA", UsedMem: mem, UsedCores: cores}
}

// Every placement is held to the container's own requests, read as HAMi's
// scheduler reads them: never a looser limit than asked for (0 MiB means no
// limit at all), never more than the device the kubelet gave.
func TestCheck(t *testing.T) {
	cases := []struct {
		name    string
		limits  map[string]string
		cfg     func(*v1.Requests)
		devs    annotations.ContainerDevices
		wantErr string // "" = accepted
	}{
		{name: "exactly the request", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 30)}},
		{name: "tighter than the request", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"},
			devs: annotations.ContainerDevices{dev("GPU-a", 500, 10)}},
		{name: "0 MiB is no limit", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", 0, 0)}, wantErr: "GPU-a: the placement gives 0 MiB (no limit at all), but the container requests nvidia.com/gpumem: 1000 (1000 MiB)"},
		{name: "more than requested", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", math.MaxInt32, 0)}, wantErr: "gives 2147483647 MiB, but the container requests nvidia.com/gpumem: 1000 (1000 MiB)"},
		{name: "core limit dropped", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0)}, wantErr: "gives 0 % of the cores (no limit), but the container requests nvidia.com/gpucores: 30"},
		{name: "more cores than requested", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "30"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 31)}, wantErr: "gives 31 % of the cores"},
		{name: "no core request: any core limit", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 100)}},
		{name: "cores past 100", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 101)}, wantErr: "gives 101 % of the cores"},
		{name: "count only: the whole device at most", limits: map[string]string{"nvidia.com/gpu": "1"},
			devs: annotations.ContainerDevices{dev("GPU-a", 16384, 0)}},
		{name: "count only: not more than the device", limits: map[string]string{"nvidia.com/gpu": "1"},
			devs: annotations.ContainerDevices{dev("GPU-a", 16385, 0)}, wantErr: "gives 16385 MiB, but the container requests 100 % of GPU-a's 16384 MiB (no memory request: the whole device)"},
		{name: "count only: not unlimited either", limits: map[string]string{"nvidia.com/gpu": "1"},
			devs: annotations.ContainerDevices{dev("GPU-a", 0, 0)}, wantErr: "0 MiB (no limit at all)"},
		{name: "percentage", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"},
			devs: annotations.ContainerDevices{dev("GPU-a", 4096, 0)}},
		{name: "percentage exceeded", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"},
			devs: annotations.ContainerDevices{dev("GPU-a", 4097, 0)}, wantErr: "requests 25 % of GPU-a's 16384 MiB (4096 MiB;"},
		{name: "percentage over 100", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0)}, wantErr: "nvidia.com/gpumem-percentage: 150 is not in 0..100"},
		{name: "memory wins over percentage", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpumem-percentage": "50"},
			devs: annotations.ContainerDevices{dev("GPU-a", 2000, 0)}, wantErr: "requests nvidia.com/gpumem: 1000"},
		{name: "memory request larger than the device", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "99999"},
			devs: annotations.ContainerDevices{dev("GPU-a", 99999, 0)}, wantErr: "more than GPU-a's 16384 MiB"},
		{name: "no count at all", limits: nil,
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0)}, wantErr: "requests no nvidia.com/gpu"},
		{name: "two devices, each checked", limits: map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0), dev("GPU-b", 0, 0)}, wantErr: "GPU-b: the placement gives 0 MiB"},
		{name: "device count differs from the request", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0), dev("GPU-b", 1000, 0)}, wantErr: "places 2 devices, but the container requests nvidia.com/gpu: 1"},
		{name: "unknown device", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
			devs: annotations.ContainerDevices{dev("GPU-z", 1000, 0)}, wantErr: "GPU-z: not a GPU of this node"},
		{name: "fractional request", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1500m"},
			devs: annotations.ContainerDevices{dev("GPU-a", 1, 0)}, wantErr: "nvidia.com/gpumem: 1500m is not a whole number"},
		{name: "memory factor", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2"}, cfg: func(r *v1.Requests) { r.MemoryFactor = 1024 },
			devs: annotations.ContainerDevices{dev("GPU-a", 2048, 0)}},
		{name: "memory factor exceeded", limits: map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2"}, cfg: func(r *v1.Requests) { r.MemoryFactor = 1024 },
			devs: annotations.ContainerDevices{dev("GPU-a", 2049, 0)}, wantErr: "requests nvidia.com/gpumem: 2 (2048 MiB)"},
		{name: "default memory", limits: map[string]string{"nvidia.com/gpu": "1"}, cfg: func(r *v1.Requests) { r.DefaultMemory = 3000 },
			devs: annotations.ContainerDevices{dev("GPU-a", 3001, 0)}, wantErr: "requests 3000 MiB (nvidia.defaultMemory: no memory request)"},
		{name: "default cores", limits: map[string]string{"nvidia.com/gpu": "1"}, cfg: func(r *v1.Requests) { r.DefaultCores = 20 },
			devs: annotations.ContainerDevices{dev("GPU-a", 1000, 0)}, wantErr: "requests 20 % (nvidia.defaultCores: no core request)"},
		{name: "other resource names", limits: map[string]string{"example.com/vgpu": "1", "example.com/vmem": "800"},
			cfg:  func(r *v1.Requests) { r.CountName, r.MemoryName = "example.com/vgpu", "example.com/vmem" },
			devs: annotations.ContainerDevices{dev("GPU-a", 801, 0)}, wantErr: "requests example.com/vmem: 800"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := hami
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			err := Check(ctr(tc.limits), tc.devs, cfg, capacity)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A request in spec.containers[].resources.requests only (no limits) is read
// as HAMi reads it: limits first, then requests.
func TestReadFallsBackToRequests(t *testing.T) {
	c := &corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem": resource.MustParse("700"),
	}}}
	r, err := Read(c, hami)
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 1 || r.MemoryMiB != 700 {
		t.Fatalf("read %+v", r)
	}
	if err := Check(c, annotations.ContainerDevices{dev("GPU-a", 701, 0)}, hami, capacity); err == nil {
		t.Fatal("701 MiB accepted under a 700 MiB request")
	}
}

// FuzzCheck: whatever the request and the placement, an accepted placement
// is never looser than the request: a memory limit of at least 1 MiB, at most
// the request (or the device), and a core limit within the request.
func FuzzCheck(f *testing.F) {
	f.Add(int64(1), int64(1000), int64(30), int64(-1), int32(1000), int32(30))
	f.Add(int64(1), int64(0), int64(0), int64(25), int32(4096), int32(0))
	f.Add(int64(2), int64(0), int64(0), int64(-1), int32(0), int32(0))
	f.Fuzz(func(t *testing.T, count, mem, cores, pct int64, usedMem, usedCores int32) {
		limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(count, resource.DecimalSI)}
		if mem != 0 {
			limits["nvidia.com/gpumem"] = *resource.NewQuantity(mem, resource.DecimalSI)
		}
		if cores != 0 {
			limits["nvidia.com/gpucores"] = *resource.NewQuantity(cores, resource.DecimalSI)
		}
		if pct >= 0 {
			limits["nvidia.com/gpumem-percentage"] = *resource.NewQuantity(pct, resource.DecimalSI)
		}
		c := &corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}}
		devs := annotations.ContainerDevices{dev("GPU-a", usedMem, usedCores)}
		if Check(c, devs, hami, capacity) != nil {
			return
		}
		if usedMem < 1 || usedMem > 16384 || (mem > 0 && int64(usedMem) > mem) || (mem == 0 && pct >= 0 && int64(usedMem) > 16384*pct/100) {
			t.Fatalf("accepted %d MiB for mem %d pct %d", usedMem, mem, pct)
		}
		if usedCores < 0 || (cores > 0 && cores < 100 && (usedCores < 1 || int64(usedCores) > cores)) || (usedCores > 100 && int64(usedCores) > cores) {
			t.Fatalf("accepted %d %% for cores %d", usedCores, cores)
		}
		if count != 1 {
			t.Fatalf("accepted one device for a count of %d", count)
		}
	})
}
