package timeslice

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/paths"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// Heartbeat is how often every grant word's sequence is bumped. libvgpu.so takes a word that has
// not changed for 500 ms (LB_SCHED_DEAD_NS, docs/hamicore.md) for a scheduler that stopped.
const Heartbeat = 10 * time.Millisecond

// Node schedules every GPU of the node: it keeps the table of containers (their grant files,
// reports and identities) and runs one loop per GPU.
type Node struct {
	GrantDir      string // <HOOK_PATH>/vgpu/sched: <key>.grant, created by the device plugin
	ContainersDir string // <HOOK_PATH>/vgpu/containers: <key>/sched.report, written by the container
	Source        Source
	Config        Config
	Scan          time.Duration // how often the table is refreshed; 0: 200 ms
	Grace         time.Duration // a grant file whose container directory is gone this long is removed; 0: 1 min
	Logger        klog.Logger
	Now           func() time.Time
	// Clocks reads each GPU's SM clock, which slices are charged by (speed.go); nil: slices are
	// charged their time.
	Clocks Clocks
	// Tracer, when set, receives every GPU's slices and clock readings (trace.go).
	Tracer Tracer

	mu     sync.Mutex
	ctrs   map[string]*ctr
	gpus   map[schedproto.UUID]*gpuLoop
	orphan map[string]time.Time
	wg     sync.WaitGroup
}

func (n *Node) now() time.Time {
	if n.Now != nil {
		return n.Now()
	}
	return time.Now()
}

// Run schedules until ctx ends; then every entry it drove is set Off (the libraries pace
// themselves at once rather than after the heartbeat's silence).
func (n *Node) Run(ctx context.Context) error {
	if err := os.MkdirAll(n.GrantDir, 0o755); err != nil {
		return err
	}
	n.ctrs, n.gpus, n.orphan = map[string]*ctr{}, map[schedproto.UUID]*gpuLoop{}, map[string]time.Time{}
	scan := n.Scan
	if scan <= 0 {
		scan = 200 * time.Millisecond
	}
	t := time.NewTicker(scan)
	defer t.Stop()
	for {
		n.refresh(ctx)
		select {
		case <-ctx.Done():
			n.wg.Wait()
			n.mu.Lock()
			for _, c := range n.ctrs {
				n.drop(c)
			}
			n.mu.Unlock()
			return nil
		case <-t.C:
		}
	}
}

// refresh brings the table up to date with the grant directory.
func (n *Node) refresh(ctx context.Context) {
	ents, err := os.ReadDir(n.GrantDir)
	if err != nil {
		n.Logger.Error(err, "Cannot list the grant files")
		return
	}
	seen := map[string]bool{}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, de := range ents {
		key, ok := strings.CutSuffix(de.Name(), schedproto.GrantSuffix)
		if !ok || key == "" || strings.HasPrefix(key, ".") || !de.Type().IsRegular() {
			continue
		}
		seen[key] = true
		if n.collect(key) {
			continue
		}
		c := n.ctrs[key]
		if c != nil && c.grant.Replaced() {
			n.Logger.V(2).Info("Grant file replaced", "container", key)
			n.drop(c)
			c = nil
		}
		if c == nil {
			if c = n.open(key); c == nil {
				continue
			}
			n.ctrs[key] = c
			n.join(ctx, c)
		} else if !c.known {
			n.identify(c)
			n.join(ctx, c)
		}
		n.reopenReport(c)
	}
	for key, c := range n.ctrs {
		if seen[key] {
			continue
		}
		// Removed while its container lives (its directory is there): its processes still hold
		// the file, so the node goes on driving them, and puts it back for the processes the
		// container starts later. Dropping it left them pacing themselves beside the others'
		// slices (a 50 % neighbour lost 0.11).
		if _, err := os.Lstat(filepath.Join(n.ContainersDir, key)); err == nil && c.grant.Gone() {
			if err := c.grant.Restore(); err != nil {
				n.Logger.Error(err, "Grant file removed; still driving the container through its mapping", "container", key)
			} else {
				n.Logger.Info("Grant file removed while its container runs: put back", "container", key)
			}
			continue
		}
		n.drop(c)
	}
}

// collect removes a grant file whose container directory has been gone for Grace (the node
// monitor removes a dead pod's directory); it reports whether the key is gone.
func (n *Node) collect(key string) bool {
	if _, err := os.Lstat(paths.ContainerDir(n.ContainersDir, key)); err == nil || !errors.Is(err, os.ErrNotExist) {
		delete(n.orphan, key)
		return false
	}
	grace := n.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	since, ok := n.orphan[key]
	if !ok {
		n.orphan[key] = n.now()
		return false
	}
	if n.now().Sub(since) < grace {
		return false
	}
	if c := n.ctrs[key]; c != nil {
		n.drop(c)
	}
	delete(n.orphan, key)
	if err := os.Remove(schedproto.GrantPath(n.GrantDir, key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.Logger.Error(err, "Cannot remove a dead container's grant file", "container", key)
	} else {
		n.Logger.V(2).Info("Removed a dead container's grant file", "container", key)
	}
	return true
}
