package monitor

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/gpu"
	"github.com/limitbed/limitbed/plugin/identity"
)

// The driver's list names a process by its PID alone, and a PID is reused once its process is
// gone. The list is read first and /proc afterwards, and a driver's record can outlive its
// process (a real driver lists a PID while it tears the context down, or while another process
// holds the descriptor of the one that made it). So, without more, the memory of a process that
// ended could be read as the memory of whichever process takes its PID next: a neighbour's new
// process judged over its container's limit and killed for the offender's memory.
//
// Each record of the list (a PID on a GPU) is therefore tied, when the monitor first sees it, to
// the process its PID named when the list was taken: its start time and its container
// (tieListed). While the driver keeps listing the record, it stands for that process only. A
// record whose PID names another process since (or none could be tied to it: its process had
// ended, or another had taken its PID, when the record was first seen) is not attributed to the
// new process's container and never leads to a signal: it is reported (Report.Changed), logged
// once and counted. The tie ends when the driver stops listing the record. Just before a signal
// the process is read again (PidfdKiller).

// Where a changed process was found (the label of hami_monitor_driver_pid_changed_total).
const (
	ChangedAtAttribution = "attribution"
	ChangedAtKill        = "kill"
)

// userHZ is the unit of a process's start time in /proc/<pid>/stat: USER_HZ, 100 on every
// architecture Go runs Linux on.
const userHZ = 100

// recordKey is one record of the driver's list: a PID on a GPU.
type recordKey struct {
	gpu string
	pid int
}

// recordTie is the process a record of the driver's list stands for.
type recordTie struct {
	// orphan: no process can be tied to the record (its process had ended when it was first
	// seen, or the process behind its PID had taken the PID of the listed one: tieListed).
	orphan      bool
	start       uint64 // the process's start time (clock ticks since boot)
	podUID      types.UID
	containerID string
	logged      bool // its change was logged and counted
}

// boottimeTicks is the time since boot in clock ticks, as /proc counts process start times (the
// reader's time namespace): CLOCK_BOOTTIME unless the test set Boottime.
func (a *Accounting) boottimeTicks() uint64 {
	if a.Boottime != nil {
		return uint64(a.Boottime() / (time.Second / userHZ))
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0 // no clock: every start is "after the list began", settled by listing again
	}
	return uint64(time.Duration(ts.Nano()) / (time.Second / userHZ))
}

// listing is when the driver's list was taken: it began in clock tick from and ended in tick to.
// A process the list names existed at some moment in between; one that took the PID of a listed
// process that ended started after that moment.
type listing struct{ from, to uint64 }

func tieTo(p identity.Process) *recordTie {
	return &recordTie{start: p.StartTime, podUID: p.PodUID, containerID: p.ContainerID}
}

// tieListed ties every record of devs seen for the first time to the process its PID names
// (reads), or to none:
//   - its process had ended when /proc was read: none;
//   - it started at least a clock tick before the list began: the process listed;
//   - it started after the list ended: none (it took the PID of the process listed);
//   - it started while the list was taken (the tick is 10 ms): either. The driver is asked again,
//     now that /proc has been read: a record it still lists is the process's (a driver stops
//     listing a process that ended), one it no longer lists was the ended process's.
//
// A record whose process could not be read otherwise, or whose second list failed, is not tied
// yet: it is skipped this pass and tied in the next.
func (a *Accounting) tieListed(devs []gpu.DeviceProcesses, reads map[int]procRead, l listing) {
	var uncertain []recordKey
	for _, d := range devs {
		if d.Err != nil {
			continue
		}
		for _, p := range d.Processes {
			k := recordKey{d.UUID, p.PID}
			if a.ties[k] != nil {
				continue
			}
			r := reads[p.PID]
			switch {
			case errors.Is(r.err, identity.ErrNoProcess):
				a.ties[k] = &recordTie{orphan: true}
			case r.err != nil:
			case r.proc.StartTime < l.from:
				a.ties[k] = tieTo(r.proc)
			case r.proc.StartTime > l.to:
				a.ties[k] = &recordTie{orphan: true}
			default:
				uncertain = append(uncertain, k)
			}
		}
	}
	if len(uncertain) == 0 {
		return
	}
	again, err := a.Driver.Processes()
	if err != nil {
		a.Logger.Error(err, "Listing the driver's processes again failed; processes that started as the list was taken are judged next pass", "processes", len(uncertain))
		return
	}
	still := map[recordKey]bool{}
	for _, d := range again {
		for _, p := range d.Processes {
			still[recordKey{d.UUID, p.PID}] = true
		}
	}
	for _, k := range uncertain {
		if still[k] {
			a.ties[k] = tieTo(reads[k.pid].proc)
		} else {
			a.ties[k] = &recordTie{orphan: true}
		}
	}
}

// changed says whether proc is another process than the one t stands for, and, when it is, whether
// it is in the same container (then the record's memory is that container's whichever of the two
// holds it: it is judged with it, but no signal is sent on it).
func (t *recordTie) changed(proc identity.Process) (changed, sameContainer bool) {
	if t == nil || (!t.orphan && t.start == proc.StartTime) {
		return false, false
	}
	same := !t.orphan && t.containerID != "" && t.containerID == proc.ContainerID && t.podUID == proc.PodUID
	return true, same
}

// noteChanged logs a changed record once and counts it.
func (a *Accounting) noteChanged(t *recordTie, pu ProcessUsage, proc identity.Process, attributed bool) {
	if t.logged {
		return
	}
	t.logged = true
	a.countChanged(ChangedAtAttribution)
	what := "not attributed to its container"
	if attributed {
		what = "judged with its container (the same as the listed process's), never signalled"
	}
	a.Logger.Info("The driver's record of a PID names another process now: "+what, "pid", pu.PID, "gpu", pu.GPU,
		"driverBytes", pu.UsedBytes, "listedStart", t.start, "listedOrphan", t.orphan, "start", proc.StartTime,
		"podUID", proc.PodUID, "containerID", proc.ContainerID)
}

func (a *Accounting) countChanged(at string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.changed == nil {
		a.changed = map[string]int{}
	}
	a.changed[at]++
}

// changedCounts returns the changed processes counted so far, by where they were found.
func (a *Accounting) changedCounts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return map[string]int{ChangedAtAttribution: a.changed[ChangedAtAttribution], ChangedAtKill: a.changed[ChangedAtKill]}
}

// dropTies forgets the ties of records the driver no longer lists (on the GPUs it could read).
func (a *Accounting) dropTies(listed map[recordKey]bool, read map[string]bool) {
	for k := range a.ties {
		if read[k.gpu] && !listed[k] {
			delete(a.ties, k)
		}
	}
}
