package monitor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/delivery"
	"github.com/limitbed/limitbed/plugin/identity"
)

// EventRecorder records Events on pods (client-go's record.EventRecorder is one).
type EventRecorder = delivery.EventRecorder

// Event reasons of the driver-truth accounting.
const (
	ReasonOverLimit       = "GPUMemoryOverLimit"
	ReasonOverLimitKilled = "GPUMemoryOverLimitKilled"
)

// Killer ends an offending process.
type Killer interface {
	// Kill SIGKILLs p if it is still the process that was judged: the same
	// PID and start time, in container c.
	Kill(p ProcessUsage, c *identity.Container) error
}

// PidfdKiller kills through a pidfd: the descriptor pins one process, and
// the process is read again after it is taken (start time, cgroup of a live
// thread), so a PID that ended and was reused meanwhile is never signalled:
// the check and the signal name the same process. Where the kernel has no
// pidfd_open (Linux 5.1 and 5.2) the process's /proc directory is the
// descriptor; where it cannot signal through a descriptor at all (before
// 5.1), nothing is signalled (errNoPidfd): a plain kill(2) could reach a
// process that took the PID after the check.
type PidfdKiller struct {
	ProcRoot string // "/proc" when empty

	// pidfdOpen and sendSignal are the system calls; tests play older kernels with them.
	pidfdOpen  func(pid, flags int) (int, error)
	sendSignal func(fd int, sig unix.Signal) error
}

// errChanged is returned when the PID no longer names the judged process.
var errChanged = errors.New("the PID no longer names the judged process")

// errNoPidfd is returned where the kernel cannot signal a process through a descriptor.
var errNoPidfd = errors.New("this kernel cannot signal a process through a descriptor (Linux 5.1 or later): not killed, only reported")

// Kill implements Killer.
func (k PidfdKiller) Kill(p ProcessUsage, c *identity.Container) error {
	root := k.ProcRoot
	if root == "" {
		root = "/proc"
	}
	fd, err := k.open(root, p.PID)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	now, err := identity.ReadProcess(root, p.PID)
	if err != nil {
		return fmt.Errorf("re-read process %d: %w", p.PID, err)
	}
	if now.StartTime != p.StartTime || now.ContainerID == "" || now.ContainerID != c.ID || (now.PodUID != "" && now.PodUID != c.PodUID) {
		return fmt.Errorf("process %d: %w (start %d, container %q; judged start %d in %q)", p.PID, errChanged, now.StartTime, now.ContainerID, p.StartTime, c.ID)
	}
	send := k.sendSignal
	if send == nil {
		send = func(fd int, sig unix.Signal) error { return unix.PidfdSendSignal(fd, sig, nil, 0) }
	}
	if err := send(fd, unix.SIGKILL); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("process %d: %w", p.PID, errNoPidfd)
		}
		return fmt.Errorf("pidfd_send_signal SIGKILL to %d: %w", p.PID, err)
	}
	return nil
}

// open returns a descriptor of process pid: a pidfd, or its /proc directory where the kernel has
// no pidfd_open (pidfd_send_signal takes either).
func (k PidfdKiller) open(root string, pid int) (int, error) {
	open := k.pidfdOpen
	if open == nil {
		open = unix.PidfdOpen
	}
	fd, err := open(pid, 0)
	if err == nil {
		return fd, nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("no pidfd_open on this kernel, and open %s: %w", dir, err)
	}
	return fd, nil
}

// episodeKey is one over-limit episode: a container, a GPU, an offender.
type episodeKey struct {
	key   identity.Key
	gpu   string
	pid   int
	start uint64
}

// enforce reports (log, Event, once per episode) every container over its
// limit and, with enforcement kill, ends its offending process. Processes
// of no known container are logged once each, never killed.
func (a *Accounting) enforce(_ context.Context, rep *Report) {
	if a.episodes == nil {
		a.episodes, a.strays = map[episodeKey]bool{}, map[int]bool{}
	}
	current := map[episodeKey]bool{}
	for i := range rep.Usage {
		u := &rep.Usage[i]
		if !u.Over || u.Offender == nil {
			continue
		}
		o := u.Offender
		ek := episodeKey{u.Container.Key, u.GPU, o.PID, o.StartTime}
		current[ek] = true
		msg := overMessage(u, a.ContextAllowance)
		if !a.episodes[ek] {
			a.Logger.Info("Container over its GPU memory limit by the driver's count", "pod", u.Container.Pod.String(), "podUID", u.Container.PodUID,
				"container", u.Container.Container, "gpu", u.GPU, "pid", o.PID, "containerPID", o.NSPID,
				"driverBytes", u.UsedBytes, "limitBytes", u.LimitBytes, "boundBytes", u.BoundBytes, "cause", u.Cause, "enforcement", a.Enforcement)
			a.event(u.Container, ReasonOverLimit, msg)
		}
		if a.Enforcement != v1.EnforcementKill {
			continue
		}
		killer := a.Killer
		if killer == nil {
			killer = PidfdKiller{ProcRoot: a.ProcRoot}
		}
		if o.Changed {
			// Its PID names another process of the container than the one the driver's record
			// stands for (tie.go): the memory is the container's, the process may not be the cause.
			if !a.episodes[ek] {
				a.countChanged(ChangedAtKill)
				a.Logger.Info("Offending process not killed: its PID names another process than the driver's record", "pod", u.Container.Pod.String(),
					"container", u.Container.Container, "pid", o.PID)
			}
			continue
		}
		if err := killer.Kill(*o, u.Container); err != nil {
			if errors.Is(err, errChanged) {
				a.countChanged(ChangedAtKill)
			}
			a.Logger.Error(err, "Offending process not killed", "pod", u.Container.Pod.String(), "container", u.Container.Container, "pid", o.PID)
			continue
		}
		rep.Killed = append(rep.Killed, *o)
		a.Logger.Info("Killed the process that put its container over its GPU memory limit", "pod", u.Container.Pod.String(),
			"container", u.Container.Container, "gpu", u.GPU, "pid", o.PID, "containerPID", o.NSPID)
		a.event(u.Container, ReasonOverLimitKilled, "killed (SIGKILL): "+msg)
	}
	for k := range a.episodes {
		if !current[k] {
			delete(a.episodes, k)
		}
	}
	for k := range current {
		a.episodes[k] = true
	}
	strays := map[int]bool{}
	for _, p := range rep.Unattributed {
		strays[p.PID] = true
		if !a.strays[p.PID] {
			a.Logger.Info("GPU process of no known container: reported, never killed", "pid", p.PID, "gpu", p.GPU, "driverBytes", p.UsedBytes)
		}
	}
	a.strays = strays
}

func overMessage(u *ContainerUsage, allowance uint64) string {
	o := u.Offender
	inside := ""
	if o.NSPID != 0 {
		inside = fmt.Sprintf(" (%d in its container)", o.NSPID)
	}
	return fmt.Sprintf("process %d%s on GPU %s holds %s; container %s holds %s there by the driver's count, over its limit %s + %d process(es) × %s context allowance = %s. Likely cause: %s",
		o.PID, inside, u.GPU, bytesText(o.UsedBytes), u.Container.Container, bytesText(u.UsedBytes), bytesText(u.LimitBytes),
		len(u.Processes), bytesText(allowance), bytesText(u.BoundBytes), u.Cause)
}

func (a *Accounting) event(c *identity.Container, reason, msg string) {
	if a.Events == nil {
		return
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: c.PodUID},
	}
	a.Events.Eventf(pod, corev1.EventTypeWarning, reason, "%s", msg)
}
