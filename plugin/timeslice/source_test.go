package timeslice

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

var gpuB = schedproto.UUID{0x3c, 0x5a, 0x7e, 0x21, 0x8f, 0x4b, 0x4d, 0x2a, 0x9b, 0x61, 0x0a, 0x1c, 0x2d, 0x3e, 0x4f, 0x51}

func TestLimitsFilesSource(t *testing.T) {
	dir := t.TempDir()
	write := func(key string, vars map[string]string) {
		b, err := limitsfile.Render(vars)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key+limitsfile.Suffix), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("u1_a", map[string]string{"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "FORCE", "CUDA_TASK_PRIORITY": "0"})
	write("u1_b", map[string]string{"CUDA_DEVICE_SM_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "sometimes"})
	src := LimitsFiles{Dir: dir}
	id, err := src.Identify("u1_a", []schedproto.UUID{testGPU})
	if err != nil || id.Limit != 30 || id.Policy != PolicyForce || id.Priority != 0 || len(id.GPUs) != 1 {
		t.Errorf("u1_a: %+v, %v", id, err)
	}
	// As libvgpu.so reads it: an unknown policy is default.
	if id, err := src.Identify("u1_b", nil); err != nil || id.Policy != PolicyDefault || id.Priority != 1 {
		t.Errorf("u1_b: %+v, %v", id, err)
	}
	if _, err := src.Identify("u1_missing", nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("missing limits file: %v, want ErrUnknown", err)
	}
}

func TestSnapshotsSource(t *testing.T) {
	ctr := func(uid, name string, lim identity.Limits, mig bool, gpus ...schedproto.UUID) *identity.Container {
		c := &identity.Container{Key: identity.Key{PodUID: types.UID("uid" + uid), Container: name}, Limits: lim, MIG: mig, GPUSource: identity.SourceKubelet}
		for _, g := range gpus {
			c.GPUs = append(c.GPUs, identity.GPU{UUID: g.String()})
		}
		return c
	}
	force := identity.Limits{Source: identity.SourceFile, SM: 30, Policy: limitsfile.PolicyForce, Priority: 2}
	snap := identity.NewSnapshot(time.Now(), []*identity.Container{
		ctr("1", "a", force, false, testGPU),
		ctr("2", "mig", force, true, testGPU),
		ctr("3", "unread", identity.Limits{Source: identity.SourceUnreadable}, false, testGPU),
	})
	takes := 0
	src := &Snapshots{Take: func(context.Context) (*identity.Snapshot, error) { takes++; return snap, nil }, MaxAge: time.Hour}
	id, err := src.Identify("uid1_a", []schedproto.UUID{testGPU, gpuB})
	if err != nil || id.Policy != PolicyForce || id.Limit != 30 || id.Priority != 2 || len(id.GPUs) != 1 || id.GPUs[0] != testGPU {
		t.Errorf("uid1_a: %+v, %v (a GPU of the grant file that is not its is dropped)", id, err)
	}
	for _, key := range []string{"uid2_mig", "uid3_unread", "uid9_gone", "nounderscore"} {
		if _, err := src.Identify(key, []schedproto.UUID{testGPU}); !errors.Is(err, ErrUnknown) {
			t.Errorf("%s: %v, want ErrUnknown", key, err)
		}
	}
	if _, err := src.Identify("uid1_a", []schedproto.UUID{gpuB}); !errors.Is(err, ErrUnknown) {
		t.Errorf("grant naming none of its GPUs: %v, want ErrUnknown", err)
	}
	if takes != 1 {
		t.Errorf("%d snapshots taken, want 1 within MaxAge", takes)
	}
}
