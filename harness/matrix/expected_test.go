package matrix

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/plugin/launch"
)

func testdata(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join("..", "..", "testdata", "matrix", name)
}

// TestExpectedGolden keeps testdata/matrix/expected.json and expected.md equal to what the design's
// rule derives for the current launch-method table (LIMITBED_UPDATE=1 rewrites them).
func TestExpectedGolden(t *testing.T) {
	t.Parallel()
	exp := Derive(launch.Methods())
	js, err := MarshalExpected(exp)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"expected.json": js, "expected.md": []byte(ExpectedMarkdown(exp))}
	for name, want := range files {
		path := testdata(t, name)
		if os.Getenv("LIMITBED_UPDATE") == "1" {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (LIMITBED_UPDATE=1 creates it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: regenerate with LIMITBED_UPDATE=1 go test ./harness/matrix -run TestExpectedGolden", path)
		}
	}
}

// TestDerive pins the design's statements, one row per rule.
func TestDerive(t *testing.T) {
	t.Parallel()
	exp := Derive(launch.Methods())
	cases := []struct {
		combo  Combo
		method string
		want   bool
	}{
		{Combo{"current", "current", "file"}, "ssh", true},
		{Combo{"current", "current", "file"}, "su -", true},
		{Combo{"current", "current", "file"}, "sudo", true},
		{Combo{"current", "current", "file"}, "cron", true},
		{Combo{"current", "current", "env"}, "ssh", false},
		{Combo{"current", "hami-v2.10", "file"}, "ssh", false},
		{Combo{"hami-v2.10", "current", "file"}, "su -", false},
		{Combo{"hami-v2.10", "hami-v2.10", "env"}, "cron", false},
		{Combo{"hami-v2.10", "hami-v2.10", "env"}, "exec", true},
		{Combo{"hami-v2.10", "hami-v2.10", "file"}, "su", true},
		{Combo{"current", "hami-v2.10", "env"}, "bash -c", true},
	}
	for _, tc := range cases {
		t.Run(tc.combo.String()+"/"+tc.method, func(t *testing.T) {
			e, ok := exp.Lookup(tc.combo, tc.method)
			if !ok || e.Enforced != tc.want {
				t.Fatalf("enforced = %v (found %v), want %v", e.Enforced, ok, tc.want)
			}
		})
	}
	if n := len(exp.Cells); n != 8*len(launch.Methods()) {
		t.Fatalf("%d cells, want %d", n, 8*len(launch.Methods()))
	}
}

// TestChecks: each check names itself when it disagrees, in both directions.
func TestChecks(t *testing.T) {
	t.Parallel()
	capped := Observation{Refused: true, TotalMiB: LimitMiB, SMITotalMiB: LimitMiB, Joined: true, HolderPID: 7, RegionPIDs: []int{7}}
	escaped := Observation{GrantedMiB: RequestMiB, TotalMiB: 16384, SMITotalMiB: 16384, HolderPID: 7}
	smiSeesCard, smiMissing, smiBroken := capped, capped, capped
	smiSeesCard.SMITotalMiB = 16384
	smiMissing.SMITotalMiB, smiMissing.SMIMissing = 0, true
	smiBroken.SMITotalMiB, smiBroken.SMIErr = 0, "Mismatch in versions between nvidia-smi and NVML."
	cases := []struct {
		name     string
		obs      Observation
		enforced bool
		want     []string
	}{
		{"capped as expected", capped, true, nil},
		{"escaped as expected", escaped, false, nil},
		{"escaped, want capped", escaped, true, []string{"refused?", "total? gpuinfo", "total? nvidia-smi", "joined?"}},
		{"capped, want escaped", capped, false, []string{"refused?", "total? gpuinfo", "total? nvidia-smi", "joined?"}},
		{"only joined missing", Observation{Refused: true, TotalMiB: LimitMiB, SMITotalMiB: LimitMiB, HolderPID: 7}, true, []string{"joined?"}},
		{"nvidia-smi sees the card where gpuinfo sees the limit", smiSeesCard, true, []string{"total? nvidia-smi shows 16384 MiB"}},
		{"nvidia-smi refuses the library", smiBroken, true, []string{"total? nvidia-smi printed"}},
		{"no nvidia-smi in the image", smiMissing, true, nil},
	}
	if got := checks(smiMissing, true, true); len(got) != 1 || !strings.Contains(got[0], "nvidia-smi is not in the workload image") {
		t.Errorf("no nvidia-smi where it is required: checks = %q", got)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := checks(tc.obs, tc.enforced, false)
			if len(got) != len(tc.want) {
				t.Fatalf("checks = %q, want %d naming %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("check %d = %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}

// TestParseJob reads the tagged job output, including a failed regiondump and a holder whose slot
// is dead.
func TestParseJob(t *testing.T) {
	t.Parallel()
	out := `probe {"requested_mib":4096,"granted_mib":0,"error":"CUDA_ERROR_OUT_OF_MEMORY","total_mib":3000,"pid":11}
gpuinfo {"devices":[{"memory_total_mib":3000}]}
smi 3000 
holder {"requested_mib":16,"granted_mib":16,"error":null,"pid":12}
region {"layout":{"name":"limitbed","major":2},"slots":[{"pid":5,"alive":true},{"pid":12,"alive":true}]} 
`
	o, err := parseJob([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if !o.Enforced() || o.HolderPID != 12 {
		t.Fatalf("observation %+v: want enforced with holder 12", o)
	}
	o, err = parseJob([]byte(strings.Replace(out, `{"pid":12,"alive":true}`, `{"pid":12,"alive":false}`, 1)))
	if err != nil || o.Joined || len(o.RegionPIDs) != 1 {
		t.Fatalf("observation %+v, err %v: want not joined, the holder's slot is dead", o, err)
	}
	o, err = parseJob([]byte(strings.Replace(out, `region {"layout":{"name":"limitbed","major":2},"slots":[{"pid":5,"alive":true},{"pid":12,"alive":true}]}`, "region /usr/local/vgpu/usage.cache: No such file", 1)))
	if err != nil || o.Joined || o.RegionErr == "" {
		t.Fatalf("observation %+v, err %v: want not joined with the region error", o, err)
	}
	if _, err := parseJob([]byte("probe {}\n")); err == nil {
		t.Fatal("missing gpuinfo/holder lines: want an error")
	}
}
