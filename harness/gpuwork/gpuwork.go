// Package gpuwork reads fakegpu's completed-work records: what its engines ran, per GPU, per
// process and per container (FAKEGPU_CONTAINER), as fakegpu's gpuwork tool prints them
// (docs/fakegpu.md, "Completed work"). It is the judge of compute limits on fakegpu: the device's
// own count of work done, never what a limiter launched or what NVML sampled. The tool owns the
// format; this package is its one reader.
package gpuwork

import (
	"encoding/json"
	"fmt"
)

// Work is what an engine ran for someone: kernels completed, nominal ns of work done (a kernel's
// share counted as it runs) and the ns the engine was busy with it. Every counter only grows.
type Work struct {
	Kernels uint64 `json:"kernels"`
	WorkNS  uint64 `json:"work_ns"`
	BusyNS  uint64 `json:"busy_ns"`
}

// Add returns the sum.
func (w Work) Add(o Work) Work {
	return Work{w.Kernels + o.Kernels, w.WorkNS + o.WorkNS, w.BusyNS + o.BusyNS}
}

// Since is w minus an earlier reading of the same counters (zero where one went backwards,
// which a later reading of fakegpu's counters never does).
func (w Work) Since(earlier Work) Work {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return Work{sub(w.Kernels, earlier.Kernels), sub(w.WorkNS, earlier.WorkNS), sub(w.BusyNS, earlier.BusyNS)}
}

// UnitWork is Work on one accounting unit (a GPU, or a MIG instance).
type UnitWork struct {
	Unit int `json:"unit"`
	Work
}

// Unit is one unit of the profile and everything its engine ran.
type Unit struct {
	Unit int `json:"unit"`
	GPU  int `json:"gpu"` // NVML index
	MIG  int `json:"mig"` // instance, -1 for a whole GPU
	Work
}

// Process is one process's record; it outlives the process (Alive false).
type Process struct {
	PID       int        `json:"pid"` // as the process saw itself
	PIDNS     uint64     `json:"pidns"`
	StartedNS uint64     `json:"started_ns"`
	Alive     bool       `json:"alive"`
	Container string     `json:"container"`
	Units     []UnitWork `json:"units"`
}

// Container is the work of every process that named it in FAKEGPU_CONTAINER.
type Container struct {
	Name  string     `json:"name"`
	Units []UnitWork `json:"units"`
}

// Snapshot is one reading, taken with the engines brought up to NowNS (CLOCK_MONOTONIC).
type Snapshot struct {
	NowNS                uint64      `json:"now_ns"`
	TimesliceNS          uint64      `json:"timeslice_ns"`
	Units                []Unit      `json:"units"`
	Processes            []Process   `json:"processes"`
	Containers           []Container `json:"containers"`
	ProcessesRecycled    uint64      `json:"processes_recycled"`
	ProcessesUnrecorded  uint64      `json:"processes_unrecorded"`
	ContainersUnrecorded uint64      `json:"containers_unrecorded"`
}

// Parse decodes one snapshot line and checks that it is one: a time, at least one unit, units
// numbered in order, and no unit a record names that the GPU does not have.
func Parse(line []byte) (Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(line, &s); err != nil {
		return s, fmt.Errorf("gpuwork output %.200q: %w", line, err)
	}
	if s.NowNS == 0 || s.TimesliceNS == 0 || len(s.Units) == 0 {
		return s, fmt.Errorf("gpuwork output %.200q: no time, time slice or unit: not a snapshot", line)
	}
	for i, u := range s.Units {
		if u.Unit != i || u.GPU < 0 || u.MIG < -1 {
			return s, fmt.Errorf("gpuwork output: unit %d (gpu %d, mig %d) at position %d", u.Unit, u.GPU, u.MIG, i)
		}
	}
	check := func(who string, us []UnitWork) error {
		for _, u := range us {
			if u.Unit < 0 || u.Unit >= len(s.Units) {
				return fmt.Errorf("gpuwork output: %s ran work on unit %d, the GPU has %d", who, u.Unit, len(s.Units))
			}
		}
		return nil
	}
	for _, p := range s.Processes {
		if err := check(fmt.Sprintf("process %d", p.PID), p.Units); err != nil {
			return s, err
		}
	}
	for _, c := range s.Containers {
		if c.Name == "" {
			return s, fmt.Errorf("gpuwork output: a container without a name")
		}
		if err := check("container "+c.Name, c.Units); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ContainerWork is the work of the named container on unit (zero before it has run any). It
// refuses when fakegpu could not record some container (its table was full): the figure may miss
// work.
func (s Snapshot) ContainerWork(name string, unit int) (Work, error) {
	if s.ContainersUnrecorded > 0 {
		return Work{}, fmt.Errorf("fakegpu could not record %d processes' containers (more than its table holds): container figures are incomplete", s.ContainersUnrecorded)
	}
	for _, c := range s.Containers {
		if c.Name == name {
			return sumUnit(c.Units, unit), nil
		}
	}
	return Work{}, nil
}

// UnitWork is everything the engine of unit ran.
func (s Snapshot) UnitWork(unit int) (Work, error) {
	if unit < 0 || unit >= len(s.Units) {
		return Work{}, fmt.Errorf("unit %d: the GPU has %d units", unit, len(s.Units))
	}
	return s.Units[unit].Work, nil
}

// ProcessWork is the work of the process pid (in its own PID namespace) on unit, summed over its
// records (a PID reused by a later process has a record of its own). It refuses when fakegpu had
// to reuse or could not make a process record: the figure may miss work.
func (s Snapshot) ProcessWork(pid, unit int) (Work, error) {
	if s.ProcessesRecycled > 0 || s.ProcessesUnrecorded > 0 {
		return Work{}, fmt.Errorf("fakegpu reused %d and could not make %d process records: process figures are incomplete", s.ProcessesRecycled, s.ProcessesUnrecorded)
	}
	var w Work
	for _, p := range s.Processes {
		if p.PID == pid {
			w = w.Add(sumUnit(p.Units, unit))
		}
	}
	return w, nil
}

func sumUnit(us []UnitWork, unit int) Work {
	var w Work
	for _, u := range us {
		if u.Unit == unit {
			w = w.Add(u.Work)
		}
	}
	return w
}
