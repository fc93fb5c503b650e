package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/gpureport/schema"
)

// TestComputeRecords: each limited run of bench compute becomes a check judged by its worst 10 s
// window, and each workload a series of every run's 1 s ratios beside its limit.
func TestComputeRecords(t *testing.T) {
	run := t.TempDir()
	outs := []computebench.Outcome{
		{Case: computebench.Case{Workload: "uniform", Policy: "force", Limit: 30}, Ratios: []float64{0.5, 0.4, 0.30, 0.31},
			Long: []float64{0.301, 0.318}, Lo: 0.28, Hi: 0.32, OK: true},
		{Case: computebench.Case{Workload: "uniform", Policy: "default", Limit: 30}, Ratios: []float64{1, 1, 0.9},
			Long: []float64{0.94}, Lo: 0.95, Hi: 1.05, OK: false, Starved: true},
	}
	if err := computeRecords(run, "compute", outs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(run, "records", "compute.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs, err := schema.ReadChecks(f, "compute.jsonl")
	if err != nil || len(cs) != 2 {
		t.Fatalf("%+v %v", cs, err)
	}
	if cs[0].Check != "bench compute uniform force 30%" || cs[0].Verdict != schema.Pass || *cs[0].Figure != 0.318 {
		t.Errorf("first check %+v (figure %v), want a pass at its worst window 0.318", cs[0], *cs[0].Figure)
	}
	if cs[1].Verdict != schema.Fail || *cs[1].Figure != 0.94 || cs[1].Note == "" {
		t.Errorf("second check %+v, want a failure at 0.94", cs[1])
	}
	sf, err := os.Open(filepath.Join(run, "series", "compute-uniform.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	s, err := schema.ParseSeries(sf, "compute-uniform", "compute-uniform.csv")
	if err != nil || s.Points() != 7 || len(s.Lines) != 2 || len(s.Refs) != 1 || s.Refs[0].Y != 0.3 {
		t.Errorf("series %+v, %v: want 7 points on 2 lines and the 30 %% limit", s, err)
	}
}

func TestDriverEnv(t *testing.T) {
	got := driverEnv([]string{"PATH=/bin", "LD_LIBRARY_PATH=/fake/lib", "FAKEGPU_PROFILE=h100-80g", "CUDA_VISIBLE_DEVICES=0",
		"CUDA_DEVICE_SM_LIMIT=30", "LD_PRELOAD=/x.so"})
	want := []string{"LD_LIBRARY_PATH=/fake/lib", "FAKEGPU_PROFILE=h100-80g", "CUDA_VISIBLE_DEVICES=0"}
	if !slices.Equal(got, want) {
		t.Errorf("driverEnv = %v, want %v (the driver's place and the GPU, never the library's variables)", got, want)
	}
}
