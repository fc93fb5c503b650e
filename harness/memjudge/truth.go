package memjudge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
)

// Truth is what the fake driver records every process holding, as fgtruth prints it
// (fakegpu/tools/fgtruth.c owns the format; this is its one decoder).
type Truth struct {
	Units  []TruthUnit   `json:"units"`
	Procs  []TruthProc   `json:"procs"`
	Shared []TruthShared `json:"shared"`
}

// TruthUnit is one accounting unit of the device state: a GPU, or a MIG instance.
type TruthUnit struct {
	Unit  int    `json:"unit"`
	GPU   int    `json:"gpu"`
	MIG   int    `json:"mig"`
	UUID  string `json:"uuid"`
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"` // everything charged to the unit: allocations, contexts, shared memory once
}

// TruthProc is one live process: what it allocated alone, and its contexts, per unit.
type TruthProc struct {
	Slot int      `json:"slot"`
	Pid  int      `json:"pid"`
	Used []uint64 `json:"used"`
	Ctx  []uint64 `json:"ctx"`
}

// TruthShared is an allocation more than one process can hold (an IPC handle, an exported VMM
// allocation): charged once to its unit while any holder lives.
type TruthShared struct {
	ID      uint64 `json:"id"`
	Unit    int    `json:"unit"`
	Bytes   uint64 `json:"bytes"`
	Kind    string `json:"kind"`
	Holders []int  `json:"holders"`
}

// ReadTruth runs fgtruth with env (the FAKEGPU_* variables of the fake host) and decodes it.
func ReadTruth(ctx context.Context, fgtruth string, env []string) (Truth, error) {
	cmd := exec.CommandContext(ctx, fgtruth)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return Truth{}, nil // no state yet: nothing was ever allocated
		}
		return Truth{}, fmt.Errorf("fgtruth: %w: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return DecodeTruth(out.Bytes())
}

// DecodeTruth parses fgtruth's output.
func DecodeTruth(b []byte) (Truth, error) {
	var t Truth
	if err := json.Unmarshal(b, &t); err != nil {
		return Truth{}, fmt.Errorf("decode fgtruth output %q: %w", truncate(b, 200), err)
	}
	for _, p := range t.Procs {
		if len(p.Used) != len(t.Units) || len(p.Ctx) != len(t.Units) {
			return Truth{}, fmt.Errorf("decode fgtruth output: process %d lists %d/%d units, the state has %d",
				p.Pid, len(p.Used), len(p.Ctx), len(t.Units))
		}
	}
	for _, s := range t.Shared {
		if s.Unit < 0 || s.Unit >= len(t.Units) {
			return Truth{}, fmt.Errorf("decode fgtruth output: shared allocation %d on unit %d of %d", s.ID, s.Unit, len(t.Units))
		}
	}
	return t, nil
}

// UnitOf returns the unit with the UUID, or -1.
func (t Truth) UnitOf(uuid string) int {
	for _, u := range t.Units {
		if u.UUID == uuid {
			return u.Unit
		}
	}
	return -1
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
