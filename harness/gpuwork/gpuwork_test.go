package gpuwork

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/fakegpu/fakegputest"
)

const sample = `{"now_ns":5000,"timeslice_ns":1024000,"units":[{"unit":0,"gpu":0,"mig":-1,"kernels":5,"work_ns":900,"busy_ns":800},` +
	`{"unit":1,"gpu":1,"mig":-1,"kernels":0,"work_ns":0,"busy_ns":0}],` +
	`"processes":[{"pid":7,"pidns":1,"started_ns":10,"alive":false,"container":"a","units":[{"unit":0,"kernels":2,"work_ns":400,"busy_ns":300}]},` +
	`{"pid":7,"pidns":2,"started_ns":20,"alive":true,"container":"b","units":[{"unit":0,"kernels":3,"work_ns":500,"busy_ns":500}]}],` +
	`"containers":[{"name":"a","units":[{"unit":0,"kernels":2,"work_ns":400,"busy_ns":300}]},{"name":"b","units":[{"unit":0,"kernels":3,"work_ns":500,"busy_ns":500}]}],` +
	`"processes_recycled":0,"processes_unrecorded":0,"containers_unrecorded":0}`

func TestParse(t *testing.T) {
	s, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		got  func() (Work, error)
		want Work
	}{
		{"container a", func() (Work, error) { return s.ContainerWork("a", 0) }, Work{2, 400, 300}},
		{"container b on unit 1", func() (Work, error) { return s.ContainerWork("b", 1) }, Work{}},
		{"a container that never ran", func() (Work, error) { return s.ContainerWork("c", 0) }, Work{}},
		{"pid 7 (two records, two namespaces)", func() (Work, error) { return s.ProcessWork(7, 0) }, Work{5, 900, 800}},
		{"unit 0", func() (Work, error) { return s.UnitWork(0) }, Work{5, 900, 800}},
	} {
		got, err := c.got()
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if _, err := s.UnitWork(2); err == nil {
		t.Error("unit 2 of a 2-unit GPU read")
	}
	if w := (Work{5, 900, 800}).Since(Work{2, 400, 300}); w != (Work{3, 500, 500}) {
		t.Errorf("Since = %+v", w)
	}
	if w := (Work{1, 1, 1}).Since(Work{2, 2, 2}); w != (Work{}) {
		t.Errorf("Since of a later reading = %+v, want zero", w)
	}
}

// Figures fakegpu says are incomplete are refused, never read as they are.
func TestIncompleteTablesAreRefused(t *testing.T) {
	for _, c := range []struct{ field, read string }{
		{"containers_unrecorded", "container"}, {"processes_recycled", "process"}, {"processes_unrecorded", "process"},
	} {
		s, err := Parse([]byte(strings.Replace(sample, `"`+c.field+`":0`, `"`+c.field+`":1`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if c.read == "container" {
			_, err = s.ContainerWork("a", 0)
		} else {
			_, err = s.ProcessWork(7, 0)
		}
		if err == nil {
			t.Errorf("%s = 1: %s figures read", c.field, c.read)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		``, `{}`, `[]`, `{"now_ns":1,"timeslice_ns":1,"units":[]}`,
		`{"now_ns":0,"timeslice_ns":1,"units":[{"unit":0,"gpu":0,"mig":-1}]}`,
		`{"now_ns":1,"timeslice_ns":1,"units":[{"unit":1,"gpu":0,"mig":-1}]}`,
		`{"now_ns":1,"timeslice_ns":1,"units":[{"unit":0,"gpu":0,"mig":-1}],"containers":[{"name":"a","units":[{"unit":3}]}]}`,
		`{"now_ns":1,"timeslice_ns":1,"units":[{"unit":0,"gpu":0,"mig":-1}],"processes":[{"pid":1,"units":[{"unit":-1}]}]}`,
		`{"now_ns":1,"timeslice_ns":1,"units":[{"unit":0,"gpu":0,"mig":-1}],"containers":[{"name":""}]}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"now_ns":1,"timeslice_ns":1,"units":[{"unit":0,"gpu":0,"mig":-1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		if s.NowNS == 0 || len(s.Units) == 0 {
			t.Fatalf("accepted %q as %+v", b, s)
		}
		for _, c := range s.Containers {
			for _, u := range c.Units {
				if _, err := s.UnitWork(u.Unit); err != nil {
					t.Fatalf("accepted %q: container %s on unit %d: %v", b, c.Name, u.Unit, err)
				}
			}
		}
	})
}

// The device's count against the workload's own: launchprobe counts the nominal work it
// launched, and after its final synchronisation all of it has run, so fakegpu's record of the
// container, of the process and of the GPU must say exactly the same; a process of another
// container is not counted for it. Read both ways: once, and through a serving tool.
func TestRecordsMatchTheWorkload(t *testing.T) {
	h := fakegputest.NewHost(t, "a16-16q")
	p, env := h.Paths, h.Env
	tool := filepath.Join(p.Bin, "gpuwork")
	ctx := context.Background()
	r, err := Open(ctx, tool, env)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type probe struct {
		Launches int     `json:"launches"`
		BusyS    float64 `json:"busy_s"`
	}
	run := func(container string, args ...string) (probe, int) {
		cmd := exec.Command(filepath.Join(p.Bin, "hamicore-launchprobe"), args...)
		cmd.Env = append(append([]string{}, env...), "FAKEGPU_CONTAINER="+container)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("launchprobe %v: %v: %s", args, err, out.String())
		}
		var pr probe
		if err := json.Unmarshal(out.Bytes(), &pr); err != nil {
			t.Fatal(err)
		}
		return pr, cmd.Process.Pid
	}
	a, pidA := run("a", "--seconds", "0.5", "--workload", "mix")
	b, _ := run("b", "--seconds", "0.3", "--workload", "burst", "--kernel-us", "200")
	for _, read := range []func() (Snapshot, error){r.Snapshot, func() (Snapshot, error) { return Once(ctx, tool, env) }} {
		s, err := read()
		if err != nil {
			t.Fatal(err)
		}
		wa, err := s.ContainerWork("a", 0)
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := s.ContainerWork("b", 0)
		pa, _ := s.ProcessWork(pidA, 0)
		all, _ := s.UnitWork(0)
		// launchprobe prints busy_s with 3 decimals: within 0.5 ms.
		if d := float64(wa.WorkNS)/1e9 - a.BusyS; d > 0.0005 || d < -0.0005 || wa.Kernels != uint64(a.Launches) {
			t.Errorf("container a: %+v, launchprobe ran %d kernels, %.3f s of work", wa, a.Launches, a.BusyS)
		}
		if wb.Kernels != uint64(b.Launches) || pa != wa || all != wa.Add(wb) {
			t.Errorf("container b %+v (%d launches), process %d %+v, GPU %+v", wb, b.Launches, pidA, pa, all)
		}
	}
}
