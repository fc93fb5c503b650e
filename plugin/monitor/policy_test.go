package monitor

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/region"
)

func gpu(b byte) [region.UUIDBytes]byte { return [region.UUIDBytes]byte{0: 0xAA, 15: b} }

func TestSwitches(t *testing.T) {
	g0, g1 := gpu(0), gpu(1)
	on := [][region.UUIDBytes]byte{g0}
	cases := []struct {
		name string
		in   []ComputeState
		want map[string]uint32
	}{
		{"alone, busy", []ComputeState{{Key: "a", Priority: 1, Active: true, GPUs: on}}, map[string]uint32{"a": 0}},
		{"equal priority neighbour busy", []ComputeState{
			{Key: "a", Priority: 1, Active: true, GPUs: on}, {Key: "b", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"a": 1, "b": 1}},
		{"equal priority neighbour idle", []ComputeState{
			{Key: "a", Priority: 1, Active: true, GPUs: on}, {Key: "b", Priority: 1, Active: false, GPUs: on},
		}, map[string]uint32{"a": 0, "b": 1}},
		{"higher priority (lower number) neighbour throttles the lower one only", []ComputeState{
			{Key: "low", Priority: 2, Active: true, GPUs: on}, {Key: "high", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"low": 1, "high": 0}},
		{"other GPU does not count", []ComputeState{
			{Key: "a", Priority: 1, Active: true, GPUs: [][region.UUIDBytes]byte{g0}}, {Key: "b", Priority: 1, Active: true, GPUs: [][region.UUIDBytes]byte{g1}},
		}, map[string]uint32{"a": 0, "b": 0}},
		{"one shared GPU of several counts", []ComputeState{
			{Key: "a", Priority: 1, Active: true, GPUs: [][region.UUIDBytes]byte{g0, g1}}, {Key: "b", Priority: 1, Active: true, GPUs: [][region.UUIDBytes]byte{g1}},
		}, map[string]uint32{"a": 1, "b": 1}},
		{"unknown GPUs may share any", []ComputeState{
			{Key: "new", Priority: 1}, {Key: "b", Priority: 1, Active: true, GPUs: on},
		}, map[string]uint32{"new": 1, "b": 0}},
		{"negative priorities order the same way", []ComputeState{
			{Key: "a", Priority: -1, Active: true, GPUs: on}, {Key: "b", Priority: 0, Active: true, GPUs: on},
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
	p := filepath.Join(d, UsageCacheName)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readU32(t *testing.T, path string, off int) uint32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.NativeEndian.Uint32(b[off:])
}

// A pass reads and clears recent_kernel, remembers activity for Hold, and
// writes util_switch into every region; broken regions are skipped.
func TestFeedbackPass(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	f := &Feedback{Dir: dir, Hold: 2 * time.Second, Now: func() time.Time { return now }, Logger: klog.Background()}
	a := computeRegion(t, dir, "pa_main", 1, 1, gpu(0))
	b := computeRegion(t, dir, "pb_main", 1, 0, gpu(0))
	other := computeRegion(t, dir, "pc_main", 1, 1, gpu(7))
	if err := os.MkdirAll(filepath.Join(dir, "pd_main"), 0o755); err != nil { // no region yet
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pd_main", UsageCacheName), []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}

	res, err := f.Pass()
	if err != nil {
		t.Fatal(err)
	}
	// a launched and b did not: b is throttled by a, a is not; c is alone on its GPU.
	if res.Switch["pa_main"] != 0 || res.Switch["pb_main"] != 1 || res.Switch["pc_main"] != 0 || len(res.Switch) != 3 {
		t.Fatalf("first pass: %v", res.Switch)
	}
	if readU32(t, a, region.LimitbedOffUtilSwitch) != 0 || readU32(t, b, region.LimitbedOffUtilSwitch) != 1 || readU32(t, other, region.LimitbedOffUtilSwitch) != 0 {
		t.Fatal("util_switch not written into the regions")
	}
	if readU32(t, a, region.LimitbedOffRecentKernel) != 0 {
		t.Fatal("recent_kernel not cleared")
	}
	// Within Hold, a is still active without launching again; then it expires.
	now = now.Add(time.Second)
	if res, _ = f.Pass(); res.Switch["pb_main"] != 1 || !res.Active["pa_main"] {
		t.Fatalf("within hold: %v %v", res.Switch, res.Active)
	}
	now = now.Add(2 * time.Second)
	if res, _ = f.Pass(); res.Switch["pb_main"] != 0 || res.Active["pa_main"] {
		t.Fatalf("after hold: %v %v", res.Switch, res.Active)
	}
	if readU32(t, b, region.LimitbedOffUtilSwitch) != 0 {
		t.Fatal("switch not cleared in the region after the neighbour went quiet")
	}
}

func TestFeedbackPassMissingDir(t *testing.T) {
	f := &Feedback{Dir: filepath.Join(t.TempDir(), "nope"), Logger: klog.Background()}
	if _, err := f.Pass(); err == nil {
		t.Fatal("want an error for a missing directory")
	}
}

// A tenant truncating its region under the monitor's mapping faults the next access: the pass
// reports it for that region instead of the monitor dying of SIGBUS.
func TestFeedbackSurvivesTruncationUnderMapping(t *testing.T) {
	p := computeRegion(t, t.TempDir(), "pa_main", 1, 1, gpu(0))
	mem, err := mapHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	err = touch(func() error { _ = atomic.LoadUint32(word(mem, region.LimitbedOffRecentKernel)); return nil })
	if err == nil {
		t.Fatal("reading a truncated mapping reported no fault")
	}
}
