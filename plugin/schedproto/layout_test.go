package schedproto

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
)

type cLayout struct {
	Fields    map[string][2]uint64 `json:"fields"`
	Sizes     map[string]uint64    `json:"sizes"`
	Constants map[string]uint64    `json:"constants"`
	Paths     map[string]string    `json:"paths"`
}

// TestLayoutMatchesSchedH compiles testdata/layout.c against hamicore/include/limitbed/sched.h and
// compares every offset, size, constant and path the C compiler reports with this package's, so
// the scheduler and libvgpu.so cannot drift. The listed fields must tile each structure.
func TestLayoutMatchesSchedH(t *testing.T) {
	root := cbuild.RepoRoot()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("a C compiler (cc) is required: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "layout")
	out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join(root, "hamicore", "include"), "-o", bin, filepath.Join("testdata", "layout.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("compile testdata/layout.c: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout: %v", err)
	}
	var c cLayout
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("decode layout JSON: %v\n%s", err, out)
	}
	goFields := map[string][2]uint64{
		"grant.magic":              {offMagic, 8},
		"grant.version":            {offVersion, 4},
		"grant.ngpus":              {offNGPUs, 4},
		"grant.period_us":          {offPeriod, 4},
		"grant.reserved":           {offPeriod + 4, entries - offPeriod - 4},
		"grant.gpu":                {entries, MaxGPUs * entrySize},
		"grant_entry.uuid":         {offUUID, 16},
		"grant_entry.word":         {offWord, 4},
		"grant_entry.grant_id":     {offGrantID, 4},
		"grant_entry.budget_us":    {offBudget, 4},
		"grant_entry.beat":         {offBeat, 4},
		"grant_entry.allowed_us":   {offAllowed, 8},
		"grant_entry.allowed_beat": {offStamp, 4},
		"grant_entry.reserved":     {offStamp + 4, entrySize - offStamp - 4},
		"report.magic":             {offMagic, 8},
		"report.version":           {offVersion, 4},
		"report.features":          {offFeatures, 4},
		"report.reserved":          {offFeatures + 4, entries - offFeatures - 4},
		"report.gpu":               {entries, MaxGPUs * entrySize},
		"report_entry.join":        {offJoin, 8},
		"report_entry.want":        {offWant, 4},
		"report_entry.active":      {offActive, 4},
		"report_entry.bell":        {offBell, 4},
		"report_entry.reserved":    {offBell + 4, entrySize - offBell - 4},
	}
	for name, cf := range c.Fields {
		gf, ok := goFields[name]
		if !ok {
			t.Errorf("sched.h field %s (offset %d, size %d) is unknown to the Go side", name, cf[0], cf[1])
		} else if gf != cf {
			t.Errorf("%s: Go has offset %d size %d, sched.h has offset %d size %d", name, gf[0], gf[1], cf[0], cf[1])
		}
	}
	for name := range goFields {
		if _, ok := c.Fields[name]; !ok {
			t.Errorf("Go field %s is not in sched.h (testdata/layout.c)", name)
		}
	}
	sizes := map[string]uint64{"grant": structSize, "grant_entry": entrySize, "report": structSize, "report_entry": entrySize}
	for st, size := range sizes {
		if c.Sizes[st] != size {
			t.Errorf("sizeof %s: sched.h %d, Go %d", st, c.Sizes[st], size)
		}
		covered := make([]int, size)
		for name, f := range c.Fields {
			if !strings.HasPrefix(name, st+".") {
				continue
			}
			for o := f[0]; o < f[0]+f[1] && o < size; o++ {
				covered[o]++
			}
		}
		for o, n := range covered {
			if n != 1 {
				t.Errorf("%s byte %d is covered by %d listed fields, want 1", st, o, n)
				break
			}
		}
	}
	goConsts := map[string]uint64{
		"LB_SCHED_VERSION": Version, "LB_SCHED_GRANT_MAGIC": GrantMagic, "LB_SCHED_REPORT_MAGIC": ReportMagic,
		"LB_SCHED_MAX_GPUS": MaxGPUs, "LB_SCHED_FILE_SIZE": FileSize, "LB_GRANT_STATE_MASK": stateMask,
		"LB_GRANT_SEQ_SHIFT": seqShift, "LB_GRANT_OFF": uint64(Off), "LB_GRANT_WAIT": uint64(Wait),
		"LB_GRANT_RUN": uint64(Run), "LB_GRANT_FREE": uint64(Free), "LB_JOIN_GRANT_SHIFT": 32,
		"LB_JOIN_JOINS_SHIFT": 16, "LB_JOIN_COUNT_MASK": 0xffff, "LB_REPORT_F_LIVE": FeatureLive,
		"LB_SCHED_LIVE_BYTE(0)": LiveByte(0),
	}
	for name, want := range goConsts {
		if got, ok := c.Constants[name]; !ok {
			t.Errorf("constant %s not printed by testdata/layout.c", name)
		} else if got != want {
			t.Errorf("%s: sched.h %d, Go %d", name, got, want)
		}
	}
	if len(c.Constants) != len(goConsts) {
		t.Errorf("layout.c prints %d constants, Go knows %d", len(c.Constants), len(goConsts))
	}
	if c.Paths["grant"] != ContainerGrantPath || c.Paths["report"] != ContainerReportPath {
		t.Errorf("paths: sched.h %v, Go %s and %s", c.Paths, ContainerGrantPath, ContainerReportPath)
	}
	if filepath.Base(ContainerReportPath) != ReportName {
		t.Errorf("ReportName %s is not the base of %s", ReportName, ContainerReportPath)
	}
}
