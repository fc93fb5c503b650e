package doctor

import (
	"reflect"
	"strings"
	"testing"
)

func TestMetricPodContainers(t *testing.T) {
	body := "# HELP x\nhami_container_memory_limit_bytes{container=\"main\",device_index=\"0\",pod_uid=\"u1\"} 1\n" +
		"hami_container_memory_limit_bytes{pod_uid=\"u2\",container=\"a\\\"b\"} 2\n" +
		"hami_container_memory_used_bytes{container=\"other\",pod_uid=\"u3\"} 3\n" +
		"hami_container_memory_limit_bytes{container=\"nouid\"} 4\n"
	got := metricPodContainers([]byte(body), "hami_container_memory_limit_bytes")
	want := map[string]bool{"u1_main": true, `u2_a"b`: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseTotals(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []uint64
		err       string
	}{
		{"gpuinfo", gpuinfoJSON(3000), []uint64{3000}, ""},
		{"nvidia-smi", "3000\n16384\n", []uint64{3000, 16384}, ""},
		{"nvidia-smi with unit", "3000 MiB\n", []uint64{3000}, ""},
		{"gpuinfo without total", `{"devices":[{"index":0}]}`, nil, "no memory_total_mib"},
		{"bad json", `{"devices":`, nil, "does not parse"},
		{"garbage", "No devices were found\n", nil, "is not a number of MiB"},
		{"empty", "", nil, "printed no device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTotals([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func FuzzMetricPodContainers(f *testing.F) {
	f.Add([]byte("hami_container_memory_limit_bytes{container=\"main\",pod_uid=\"u1\"} 1\n"))
	f.Add([]byte("hami_container_memory_limit_bytes{pod_uid=\"u\\\\\",container=\"\\\"\"} 1\nx{"))
	f.Add([]byte("hami_container_memory_limit_bytes{a=\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for k := range metricPodContainers(b, "hami_container_memory_limit_bytes") {
			if !strings.Contains(k, "_") {
				t.Fatalf("key %q has no separator", k)
			}
		}
	})
}

func FuzzParseTotals(f *testing.F) {
	f.Add([]byte(gpuinfoJSON(3000)))
	f.Add([]byte("3000\n16384\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseTotals(b)
		if err == nil && len(got) == 0 && !strings.HasPrefix(strings.TrimSpace(string(b)), "{") {
			t.Fatalf("no devices and no error for %q", b)
		}
	})
}
