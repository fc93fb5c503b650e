package nvsmi

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseTotals(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint64
		err  string
	}{
		{"3000\n", []uint64{3000}, ""},
		{"16384\n16384\n", []uint64{16384, 16384}, ""},
		{"40960 MiB\n", []uint64{40960}, ""},
		{"\n  3000  \n\n", []uint64{3000}, ""},
		{"", nil, "no GPU"},
		{"[N/A]\n", nil, `"[N/A]" is not a number`},
		{"Mismatch in versions between nvidia-smi and NVML.\n", nil, "is not a number"},
	} {
		got, err := ParseTotals([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTotals(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTotals(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseCSV(t *testing.T) {
	out := "name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n" +
		"NVIDIA A16-16Q, 16384 MiB, 1300 MiB, 0 %\nNVIDIA A100-SXM4-40GB, 40960 MiB, 0 MiB, [N/A]\n"
	rows, err := ParseCSV([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"name": "NVIDIA A16-16Q", "memory.total": "16384 MiB", "memory.used": "1300 MiB", "utilization.gpu": "0 %"},
		{"name": "NVIDIA A100-SXM4-40GB", "memory.total": "40960 MiB", "memory.used": "0 MiB", "utilization.gpu": "[N/A]"},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	if n, ok := MiB(rows[0]["memory.used"]); !ok || n != 1300 {
		t.Errorf("MiB = %d, %v", n, ok)
	}
	if _, ok := MiB(rows[1]["utilization.gpu"]); ok {
		t.Error("[N/A] read as a number")
	}
	for _, bad := range []string{"", "a,b\n1,2,3\n", "a\n\"x\n"} {
		if _, err := ParseCSV([]byte(bad)); err == nil {
			t.Errorf("ParseCSV(%q): no error", bad)
		}
	}
}

func TestLocate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LIMITBED_CACHE", dir)
	t.Setenv(EnvBinary, "")
	if _, err := Locate(); err == nil || !strings.Contains(err.Error(), "scripts/nvidia-smi.sh") {
		t.Fatalf("empty cache: %v, want the fix named", err)
	}
	for _, v := range []string{"535.9.0-1", "535.10.0-1", "525.147.05-1"} {
		p := filepath.Join(dir, "nvidia-smi", v, "nvidia-smi")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Locate()
	if err != nil || !strings.Contains(got, "535.10.0-1") {
		t.Fatalf("Locate = %q, %v; want the newest, 535.10.0-1", got, err)
	}
	t.Setenv(EnvBinary, filepath.Join(dir, "none"))
	if _, err := Locate(); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Fatalf("a missing %s: %v", EnvBinary, err)
	}
}

func FuzzParseTotals(f *testing.F) {
	for _, s := range []string{"3000\n", "16384\n16384\n", "[N/A]", "", "40960 MiB"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		totals, err := ParseTotals(b)
		if err == nil && len(totals) == 0 {
			t.Fatal("no error and no total")
		}
	})
}

func FuzzParseCSV(f *testing.F) {
	f.Add([]byte("name, memory.total [MiB]\nX, 1 MiB\n"))
	f.Add([]byte("pid, process_name\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := ParseCSV(b)
		if err != nil {
			return
		}
		for _, r := range rows {
			for k := range r {
				if strings.Contains(k, " [") {
					t.Fatalf("key %q keeps its unit", k)
				}
			}
		}
	})
}
