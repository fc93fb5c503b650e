package limitsfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// canonicalResolved renders the fields of r in resolved.env's form (the C
// library's lb_config_canonical), limited to what Resolve decides.
func canonicalResolved(r Resolved) map[string]string {
	out := map[string]string{}
	for i, m := range r.Memory {
		switch m {
		case 0:
			out[fmt.Sprintf("mem_limit_%d", i)] = "refuse"
		case Unlimited:
		default:
			out[fmt.Sprintf("mem_limit_%d", i)] = fmt.Sprint(m)
		}
	}
	out["oversubscribe"] = "0"
	if r.Oversubscribe {
		out["oversubscribe"] = "1"
	}
	out["policy"] = r.Policy
	out["priority"] = fmt.Sprint(r.Priority)
	same := true
	for _, s := range r.SM {
		same = same && s == r.SM[0]
	}
	for i, s := range r.SM {
		switch {
		case same && i == 0 && s != 100:
			out["sm_limit_all"] = fmt.Sprint(s)
		case !same && s != 100:
			out[fmt.Sprintf("sm_limit_%d", i)] = fmt.Sprint(s)
		}
	}
	return out
}

// TestResolvedVectors holds Resolve to the C library: for every shared vector
// (valid and malformed) the limits the Go resolver derives are exactly the
// ones resolved.env records for libvgpu.so (memory per device, refusals,
// compute limits, policy, priority, oversubscription). The environment cannot
// matter: in file mode the file governs all of these.
func TestResolvedVectors(t *testing.T) {
	dirs := append(caseDirs(t, "valid"), caseDirs(t, "malformed")...)
	if len(dirs) < 15 {
		t.Fatalf("expected at least 15 vectors, found %d", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "limits"))
			if err != nil {
				t.Fatal(err)
			}
			want := readEnv(t, filepath.Join(dir, "resolved.env"))
			for _, k := range []string{"cache_path", "hostpid_broker", "log_level"} {
				delete(want, k) // not limits: the node does not judge by them
			}
			got := canonicalResolved(Resolve(Parse(data)))
			if FormatEnv(got) != FormatEnv(want) {
				t.Errorf("resolved differently from the C library\n--- Go\n%s--- C (resolved.env)\n%s", FormatEnv(got), FormatEnv(want))
			}
		})
	}
}

// TestResolveTable covers what the vectors do not: the global limit under a
// device's "0", a rejected global limit, per-device compute limits and
// out-of-range values.
func TestResolveTable(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       map[string]string
	}{
		{"global fills devices, own 0 falls back", "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT_1=0\nCUDA_DEVICE_MEMORY_LIMIT_2=2g\n",
			map[string]string{"mem_limit_0": "1073741824", "mem_limit_1": "1073741824", "mem_limit_2": "2147483648"}},
		{"rejected global refuses unset devices", "CUDA_DEVICE_MEMORY_LIMIT=1x\nCUDA_DEVICE_MEMORY_LIMIT_3=2g\n",
			map[string]string{"mem_limit_0": "refuse", "mem_limit_3": "2147483648", "mem_limit_15": "refuse"}},
		{"rejected then valid", "CUDA_DEVICE_MEMORY_LIMIT_0=3x\nCUDA_DEVICE_MEMORY_LIMIT_0=3g\n",
			map[string]string{"mem_limit_0": "3221225472", "mem_limit_1": ""}},
		{"device 16 is not limited", "CUDA_DEVICE_MEMORY_LIMIT_16=1g\n", map[string]string{"mem_limit_0": "", "mem_limit_15": ""}},
		{"per-device compute", "CUDA_DEVICE_SM_LIMIT=30\nCUDA_DEVICE_SM_LIMIT_1=0\nCUDA_DEVICE_SM_LIMIT_2=101\n",
			map[string]string{"sm_limit_0": "30", "sm_limit_1": "", "sm_limit_2": "", "sm_limit_3": "30"}},
		{"policy and priority", "GPU_CORE_UTILIZATION_POLICY=FORCE\nCUDA_TASK_PRIORITY=-3\n", map[string]string{"policy": "force", "priority": "-3"}},
		{"bad priority and policy", "GPU_CORE_UTILIZATION_POLICY=loose\nCUDA_TASK_PRIORITY=1000001\n", map[string]string{"policy": "default", "priority": "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := canonicalResolved(Resolve(Parse([]byte(c.file))))
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, strings.TrimSpace(FormatEnv(got)))
				}
			}
		})
	}
}
