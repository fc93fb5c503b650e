package matrix

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/fixtures"
)

// TestJoinedHAMiCoreRegion: the joined? check reads a region that upstream HAMi-core wrote, through
// the same regiondump the cells run: the holder (pid 5441 in the fixture) joined; while another
// pid did not; and after the holder exited (its slot's pid cleared) nobody did.
func TestJoinedHAMiCoreRegion(t *testing.T) {
	p := cbuild.Build(t)
	for _, tc := range []struct {
		fixture string
		holder  int
		joined  bool
	}{
		{"live-1024mib", 5441, true},
		{"live-1024mib", 5442, false},
		{"after-exit", 5441, false},
	} {
		t.Run(fmt.Sprintf("%s/pid%d", tc.fixture, tc.holder), func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "usage.cache")
			if err := os.WriteFile(cache, fixtures.Read(t, "hami-core-region/"+tc.fixture+".cache.gz"), 0o666); err != nil {
				t.Fatal(err)
			}
			dump, err := exec.Command(filepath.Join(p.Bin, "regiondump"), cache).CombinedOutput()
			if err != nil {
				t.Fatalf("regiondump: %v\n%s", err, dump)
			}
			out := fmt.Sprintf(`probe {"requested_mib":4096,"granted_mib":0,"error":"CUDA_ERROR_OUT_OF_MEMORY","total_mib":3000,"pid":11}
gpuinfo {"devices":[{"memory_total_mib":3000}]}
smi 3000 
holder {"requested_mib":16,"granted_mib":16,"error":null,"pid":%d}
region %s
`, tc.holder, strings.ReplaceAll(string(dump), "\n", " "))
			o, err := parseJob([]byte(out))
			if err != nil {
				t.Fatal(err)
			}
			if o.Joined != tc.joined || o.RegionErr != "" {
				t.Fatalf("observation %+v: want joined=%v", o, tc.joined)
			}
		})
	}
}
