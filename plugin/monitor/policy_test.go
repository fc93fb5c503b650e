package monitor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/region"
)

func regionGPU(b byte) [region.UUIDBytes]byte { return [region.UUIDBytes]byte{0: 0xAA, 15: b} }

func TestSwitches(t *testing.T) {
	g0, g1 := "GPU-0", "GPU-1"
	on := []string{g0}
	cases := []struct {
		name string
		in   []ComputeState
		want map[string]uint32
	}{
		{"alone, busy", []ComputeState{{Known: true, Key: "a", Priority: 1, Active: true, GPUs: on}}, map[string]uint32{"a": 0}},
		{"equal priority neighbour busy", []ComputeState{
			{Known: true, Key: "a", Priority: 1, Active: true, GPUs: on}, {Known: true, Key: "b", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"a": 1, "b": 1}},
		{"equal priority neighbour idle", []ComputeState{
			{Known: true, Key: "a", Priority: 1, Active: true, GPUs: on}, {Known: true, Key: "b", Priority: 1, Active: false, GPUs: on},
		}, map[string]uint32{"a": 0, "b": 1}},
		{"higher priority (lower number) neighbour throttles the lower one only", []ComputeState{
			{Known: true, Key: "low", Priority: 2, Active: true, GPUs: on}, {Known: true, Key: "high", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"low": 1, "high": 0}},
		{"other GPU does not count", []ComputeState{
			{Known: true, Key: "a", Priority: 1, Active: true, GPUs: []string{g0}}, {Known: true, Key: "b", Priority: 1, Active: true, GPUs: []string{g1}},
		}, map[string]uint32{"a": 0, "b": 0}},
		{"one shared GPU of several counts", []ComputeState{
			{Known: true, Key: "a", Priority: 1, Active: true, GPUs: []string{g0, g1}}, {Known: true, Key: "b", Priority: 1, Active: true, GPUs: []string{g1}},
		}, map[string]uint32{"a": 1, "b": 1}},
		{"unknown GPUs may share any", []ComputeState{
			{Known: true, Key: "new", Priority: 1}, {Known: true, Key: "b", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"new": 1, "b": 0}},
		{"holding no GPU shares none", []ComputeState{
			{Known: true, Key: "cpu", Priority: 1, Active: true, GPUs: []string{}}, {Known: true, Key: "b", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"cpu": 0, "b": 0}},
		{"an unknown container is throttled, and throttles every GPU's busy neighbours", []ComputeState{
			{Key: "stranger", Priority: 5, Active: true}, {Known: true, Key: "b", Priority: -9, Active: true, GPUs: on},
		}, map[string]uint32{"stranger": 1, "b": 1}},
		{"negative priorities order the same way", []ComputeState{
			{Known: true, Key: "a", Priority: -1, Active: true, GPUs: on}, {Known: true, Key: "b", Priority: 0, Active: true, GPUs: on},
		}, map[string]uint32{"a": 0, "b": 1}},
		{"empty", nil, map[string]uint32{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Switches(c.in)
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("switch of %s = %d, want %d (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// computeRegion is a region file with the compute fields set.
func computeRegion(t *testing.T, dir, name string, priority int32, recent uint32, uuids ...[region.UUIDBytes]byte) string {
	t.Helper()
	b := region.LimitbedSpec{Priority: priority, Recent: recent, GPUs: uuids}.Bytes()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, paths.UsageCacheName)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func computeOf(t *testing.T, path string) region.Compute {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := region.DecodeLimitbedCompute(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// staticIdentity is an IdentitySource of fixed containers.
type staticIdentity struct {
	cs  []*identity.Container
	err error
}

func (s staticIdentity) Snapshot(context.Context) (*identity.Snapshot, error) {
	return identity.NewSnapshot(time.Now(), s.cs), s.err
}

// known is a container "<uid>_main" on gpus with priority.
func known(uid string, priority int32, gpus ...string) *identity.Container {
	c := &identity.Container{Key: identity.Key{PodUID: types.UID(uid), Container: "main"}, GPUSource: identity.SourceKubelet, Ordered: true,
		Limits: identity.Limits{Source: identity.SourceFile, Priority: priority}}
	for _, g := range gpus {
		c.GPUs = append(c.GPUs, identity.GPU{UUID: g})
	}
	return c
}

// A pass reads and clears recent_kernel, remembers activity for Hold, and
// writes util_switch into every region; broken regions are skipped.
func TestFeedbackPass(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	ids := staticIdentity{cs: []*identity.Container{known("pa", 1, "GPU-0"), known("pb", 1, "GPU-0"), known("pc", 1, "GPU-7"), known("pd", 1, "GPU-0")}}
	f := &Feedback{Dir: dir, Identity: ids, Hold: 2 * time.Second, Now: func() time.Time { return now }, Logger: klog.Background()}
	a := computeRegion(t, dir, "pa_main", 1, 1, regionGPU(0))
	b := computeRegion(t, dir, "pb_main", 1, 0, regionGPU(0))
	other := computeRegion(t, dir, "pc_main", 1, 1, regionGPU(7))
	if err := os.MkdirAll(filepath.Join(dir, "pd_main"), 0o755); err != nil { // no region yet
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pd_main", paths.UsageCacheName), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}

	res, err := f.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// a launched and b did not: b is throttled by a, a is not; c is alone on its GPU.
	if res.Switch["pa_main"] != 0 || res.Switch["pb_main"] != 1 || res.Switch["pc_main"] != 0 || len(res.Switch) != 3 {
		t.Fatalf("first pass: %v", res.Switch)
	}
	if computeOf(t, a).UtilSwitch != 0 || computeOf(t, b).UtilSwitch != 1 || computeOf(t, other).UtilSwitch != 0 {
		t.Fatal("util_switch not written into the regions")
	}
	if computeOf(t, a).RecentKernel != 0 {
		t.Fatal("recent_kernel not cleared")
	}
	// Within Hold, a is still active without launching again; then it expires.
	now = now.Add(time.Second)
	if res, _ = f.Pass(context.Background()); res.Switch["pb_main"] != 1 || !res.Active["pa_main"] {
		t.Fatalf("within hold: %v %v", res.Switch, res.Active)
	}
	now = now.Add(2 * time.Second)
	if res, _ = f.Pass(context.Background()); res.Switch["pb_main"] != 0 || res.Active["pa_main"] {
		t.Fatalf("after hold: %v %v", res.Switch, res.Active)
	}
	if computeOf(t, b).UtilSwitch != 0 {
		t.Fatal("switch not cleared in the region after the neighbour went quiet")
	}
}

func TestFeedbackPassMissingDir(t *testing.T) {
	f := &Feedback{Dir: filepath.Join(t.TempDir(), "nope"), Identity: staticIdentity{}, Logger: klog.Background()}
	if _, err := f.Pass(context.Background()); err == nil {
		t.Fatal("want an error for a missing directory")
	}
}

// A tenant truncating its region under the monitor's mapping faults the next access: the pass
// reports it for that region instead of the monitor dying of SIGBUS.
func TestFeedbackSurvivesTruncationUnderMapping(t *testing.T) {
	p := computeRegion(t, t.TempDir(), "pa_main", 1, 1, regionGPU(0))
	mem, err := mapHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	err = touch(func() error { _ = region.TakeRecentKernel(mem); return nil })
	if err == nil {
		t.Fatal("reading a truncated mapping reported no fault")
	}
}
