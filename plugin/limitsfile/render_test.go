package limitsfile

import (
	"strings"
	"testing"
)

func TestRenderRejects(t *testing.T) {
	long := strings.Repeat("x", MaxLineLen)
	cases := []struct {
		name string
		vars map[string]string
		want string // substring of the error
	}{
		{"newline in value", map[string]string{"CUDA_DEVICE_SM_LIMIT": "50\nCUDA_DEVICE_MEMORY_LIMIT_0=0"}, "forbidden byte"},
		{"carriage return in value", map[string]string{"LIBCUDA_LOG_LEVEL": "1\r"}, "forbidden byte"},
		{"NUL in value", map[string]string{"LIBCUDA_LOG_LEVEL": "1\x00"}, "forbidden byte"},
		{"equals in key", map[string]string{"A=B": "1"}, "not a valid variable name"},
		{"NUL in key", map[string]string{"A\x00": "1"}, "not a valid variable name"},
		{"empty key", map[string]string{"": "1"}, "not a valid variable name"},
		{"digit first", map[string]string{"1A": "1"}, "not a valid variable name"},
		{"empty value", map[string]string{"CUDA_TASK_PRIORITY": ""}, "empty value"},
		{"reserved format key", map[string]string{FormatKey: "1"}, "reserved"},
		{"bad memory suffix", map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "3000mb"}, "does not match"},
		{"negative memory", map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "-1m"}, "does not match"},
		{"octal-looking memory", map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "0100m"}, "leading zero"},
		{"memory overflow", map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "99999999999999999999"}, "overflows"},
		{"memory overflow with suffix", map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "17179869184g"}, "overflows"},
		{"line too long", map[string]string{"LIBCUDA_LOG_LEVEL": long}, "longer than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.vars)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRenderEmptyHasFormatLine(t *testing.T) {
	got, err := Render(nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "HAMI_LIMITS_FORMAT=1\n" {
		t.Fatalf("got %q", got)
	}
}

func TestParseMemory(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"0m", 0, true}, {"1", 1, true}, {"1k", 1024, true}, {"1K", 1024, true},
		{"3000m", 3145728000, true}, {"3g", 3 << 30, true}, {"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false}, {"17179869184g", 0, false}, {"17179869183g", 17179869183 << 30, true}, {"", 0, false}, {"m", 0, false},
		{"1t", 0, false}, {" 1m", 0, false}, {"0x10", 0, false}, {"1.5g", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseMemory(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestIsMemoryKey(t *testing.T) {
	for k, want := range map[string]bool{
		"CUDA_DEVICE_MEMORY_LIMIT": true, "CUDA_DEVICE_MEMORY_LIMIT_0": true, "CUDA_DEVICE_MEMORY_LIMIT_15": true,
		"CUDA_DEVICE_MEMORY_LIMIT_": false, "CUDA_DEVICE_MEMORY_LIMIT_X": false, "CUDA_DEVICE_MEMORY_SHARED_CACHE": false,
		"CUDA_DEVICE_SM_LIMIT": false,
	} {
		if got := IsMemoryKey(k); got != want {
			t.Errorf("IsMemoryKey(%q) = %v", k, got)
		}
	}
}
