package computebench

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
	"github.com/limitbed/limitbed/plugin/timeslice"
)

// binaryCmd is the scheduler binary for the node whose hook path is hook, with the node's fakegpu
// environment (its NVML reads each GPU's SM clock there).
func (s *Scheduled) binaryCmd(hook string, gpuEnv []string, cfg timeslice.Config) *exec.Cmd {
	cmd := exec.Command(s.Binary, "--hook-path="+hook, "--metrics-address=", "--period="+cfg.Period.String(),
		"--drain-wait="+cfg.DrainWait.String())
	cmd.Env = append(os.Environ(), gpuEnv...)
	return cmd
}

func (s *Scheduled) config() timeslice.Config {
	if s.Config.Period == 0 {
		return timeslice.DefaultConfig()
	}
	return s.Config
}

// Handover is one node's scheduler handed from one process to the next (Rollout).
type Handover struct {
	Hook    string        // the node's hook path
	OldPID  int           // the process that was stopped
	Stop    time.Duration // from its SIGTERM to its exit
	OldExit error         // how it ended: nil for status 0
	Gap     time.Duration // from its exit to the next one's start
	NewPID  int
}

// Rollout hands every node's scheduler over to a new process the way the chart's DaemonSet rolls
// (maxSurge 0, maxUnavailable 1; docs/plugin.md, "One scheduler per node"): the old process gets
// SIGTERM and is waited for (it sets every entry Off on its way out: the libraries pace
// themselves), and the new one starts gap after it ended, as a pod replaced on a loaded node. Only
// with Binary: in process there is no process to replace.
func (s *Scheduled) Rollout(gap time.Duration) ([]Handover, error) {
	s.mu.Lock()
	if s.Binary == "" {
		s.mu.Unlock()
		return nil, errors.New("rollout: Scheduled.Binary is not set (in process there is no process to replace)")
	}
	nodes := s.nodes
	s.nodes = map[string]*schedNode{}
	s.mu.Unlock()
	var out []Handover
	var errs []error
	for containers, sn := range nodes {
		if sn.cmd == nil || sn.cmd.Process == nil {
			errs = append(errs, fmt.Errorf("rollout of %s: its scheduler never started", sn.hook))
			continue
		}
		h := Handover{Hook: sn.hook, OldPID: sn.cmd.Process.Pid}
		stop := time.Now()
		sn.cancel()
		h.OldExit = <-sn.done
		ended := time.Now()
		h.Stop = ended.Sub(stop)
		time.Sleep(gap)
		s.mu.Lock()
		s.start(sn.hook, sn.gpuEnv)
		next := s.nodes[containers]
		s.mu.Unlock()
		h.Gap = time.Since(ended)
		if next.cmd == nil || next.cmd.Process == nil {
			errs = append(errs, fmt.Errorf("rollout of %s: %w", sn.hook, <-next.done))
			continue
		}
		h.NewPID = next.cmd.Process.Pid
		out = append(out, h)
	}
	return out, errors.Join(errs...)
}

// Surplus is a second scheduler started on a node's hook path while the first ran (Second).
type Surplus struct {
	Hook     string
	FirstPID int
	Exit     int           // its exit status; -1: still running at the bound (then killed)
	Took     time.Duration // from its start to its exit
	Stderr   string
	// Off names the grant entries (key/GPU UUID) read Off while it ran and for a settle after:
	// a scheduler that drove them and let go.
	Off []string
	// Holder is the lock file's content once it ended: the first scheduler's host, pid and start.
	Holder string
}

// Second starts a second scheduler on every node's hook path while the first runs (a DaemonSet
// rolled with surge, a copy started by hand, a restart overlapping its predecessor) and waits up
// to bound for it to end; meanwhile, and for settle after, it reads every grant entry of the node
// about a millisecond apart for one set Off. Only with Binary.
func (s *Scheduled) Second(bound, settle time.Duration) ([]Surplus, error) {
	s.mu.Lock()
	if s.Binary == "" {
		s.mu.Unlock()
		return nil, errors.New("second scheduler: Scheduled.Binary is not set")
	}
	type first struct {
		hook   string
		gpuEnv []string
		pid    int
	}
	var firsts []first
	for _, sn := range s.nodes {
		if sn.cmd != nil && sn.cmd.Process != nil {
			firsts = append(firsts, first{sn.hook, sn.gpuEnv, sn.cmd.Process.Pid})
		}
	}
	cfg := s.config()
	s.mu.Unlock()
	var out []Surplus
	for _, f := range firsts {
		sp, err := s.second(f.hook, f.gpuEnv, cfg, bound, settle)
		if err != nil {
			return out, err
		}
		sp.FirstPID = f.pid
		out = append(out, sp)
	}
	return out, nil
}

func (s *Scheduled) second(hook string, gpuEnv []string, cfg timeslice.Config, bound, settle time.Duration) (Surplus, error) {
	sp := Surplus{Hook: hook, Exit: -1}
	cmd := s.binaryCmd(hook, gpuEnv, cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	grants := schedproto.GrantDir(hook)
	off := map[string]bool{}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sp, fmt.Errorf("second scheduler on %s: %w", hook, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var settled <-chan time.Time
	limit := time.After(bound)
	for ended := false; ; {
		offEntries(grants, off)
		select {
		case err := <-done:
			sp.Took, ended = time.Since(start), true
			sp.Exit = cmd.ProcessState.ExitCode()
			if ee := (*exec.ExitError)(nil); err != nil && !errors.As(err, &ee) {
				return sp, fmt.Errorf("second scheduler on %s: %w", hook, err)
			}
			settled = time.After(settle)
		case <-limit:
			if !ended {
				_ = cmd.Process.Kill()
				<-done
				ended = true
				settled = time.After(settle)
			}
		case <-settled:
			sp.Stderr = strings.TrimSpace(stderr.String())
			sp.Off = slices.Sorted(maps.Keys(off))
			b, err := os.ReadFile(filepath.Join(grants, timeslice.LockName))
			sp.Holder = strings.TrimSpace(string(b))
			return sp, err
		case <-time.After(time.Millisecond):
		}
	}
}

// offEntries adds to off every entry of the grant files in dir that reads Off (key/GPU UUID).
func offEntries(dir string, off map[string]bool) {
	files, _ := filepath.Glob(filepath.Join(dir, "*"+schedproto.GrantSuffix))
	for _, f := range files {
		g, err := schedproto.ReadGrant(f)
		if err != nil {
			continue
		}
		for _, e := range g.GPU {
			if e.State == schedproto.Off {
				off[strings.TrimSuffix(filepath.Base(f), schedproto.GrantSuffix)+"/"+e.UUID.String()] = true
			}
		}
	}
}

// GrantStates reads every entry of every node's grant files: its state by key/GPU UUID, and the
// heartbeat it carries (Beat), for a test that asks who drives them.
func (s *Scheduled) GrantStates() (map[string]schedproto.GrantEntry, error) {
	s.mu.Lock()
	var hooks []string
	for _, sn := range s.nodes {
		hooks = append(hooks, sn.hook)
	}
	s.mu.Unlock()
	out := map[string]schedproto.GrantEntry{}
	for _, hook := range hooks {
		files, err := filepath.Glob(filepath.Join(schedproto.GrantDir(hook), "*"+schedproto.GrantSuffix))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			g, err := schedproto.ReadGrant(f)
			if err != nil {
				return nil, err
			}
			for _, e := range g.GPU {
				out[strings.TrimSuffix(filepath.Base(f), schedproto.GrantSuffix)+"/"+e.UUID.String()] = e
			}
		}
	}
	return out, nil
}
