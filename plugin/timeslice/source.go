package timeslice

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// ErrUnknown wraps the error of a container the source cannot identify: it is not scheduled (its
// grant entries stay Off and its library paces itself).
var ErrUnknown = errors.New("identity unknown")

// Source gives the trusted identity of a container: its GPUs, limit, policy and priority, from
// records the container cannot write. gpus are the GPUs its grant file names (the device
// plugin's record of what it allocated). It is the one seam through which the scheduler learns
// who a container is.
type Source interface {
	Identify(key string, gpus []schedproto.UUID) (Identity, error)
}

func fromLimits(key string, gpus []schedproto.UUID, l identity.Limits) Identity {
	id := Identity{Key: key, GPUs: gpus, Limit: int(l.SM), Policy: PolicyDefault, Priority: l.Priority}
	switch l.Policy {
	case limitsfile.PolicyForce:
		id.Policy = PolicyForce
	case limitsfile.PolicyDisable:
		id.Policy = PolicyDisable
	}
	return id
}

// LimitsFiles identifies a container from the device plugin's limits file, <Dir>/<key>.limits
// (root-owned; the container sees it read-only at /overrideEnv), read as libvgpu.so resolves it
// (identity.ReadLimits), and its GPUs from its grant file. For nodes without the API server's and
// the kubelet's view (the harness's simulated nodes), and file mode only.
type LimitsFiles struct {
	Dir string // <HOOK_PATH>/vgpu/containers
}

// Identify implements Source.
func (l LimitsFiles) Identify(key string, gpus []schedproto.UUID) (Identity, error) {
	lim, err := identity.ReadLimits(filepath.Join(l.Dir, key+limitsfile.Suffix))
	if err != nil {
		return Identity{Key: key}, fmt.Errorf("container %s: %w: %w", key, ErrUnknown, err)
	}
	return fromLimits(key, gpus, lim), nil
}

// Snapshots identifies containers from the node's identity service (plugin/identity): the API
// server's pods, the kubelet's devices per container, the plugin's limits files (or, in env mode,
// the scheduler's placement). A snapshot is taken at most every MaxAge.
type Snapshots struct {
	Take   func(context.Context) (*identity.Snapshot, error) // (*identity.Sources).Snapshot
	MaxAge time.Duration                                     // 0: 2 s

	mu   sync.Mutex
	snap *identity.Snapshot
	err  error
}

func (s *Snapshots) current() (*identity.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	age := s.MaxAge
	if age <= 0 {
		age = 2 * time.Second
	}
	if s.snap == nil || time.Since(s.snap.Taken) > age {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		snap, err := s.Take(ctx)
		cancel()
		if err != nil && s.snap == nil {
			return nil, err
		}
		if err == nil {
			s.snap = snap
		}
		s.err = err
	}
	return s.snap, nil
}

// Identify implements Source. A GPU the grant file names but the node's record does not give the
// container is not scheduled for it (its entry stays Off).
func (s *Snapshots) Identify(key string, gpus []schedproto.UUID) (Identity, error) {
	uid, ctr, ok := strings.Cut(key, "_")
	if !ok {
		return Identity{Key: key}, fmt.Errorf("container %s: %w: not <podUID>_<container>", key, ErrUnknown)
	}
	snap, err := s.current()
	if err != nil {
		return Identity{Key: key}, fmt.Errorf("container %s: %w: %w", key, ErrUnknown, err)
	}
	c, ok := snap.Container(identity.Key{PodUID: types.UID(uid), Container: ctr})
	switch {
	case !ok:
		return Identity{Key: key}, fmt.Errorf("container %s: %w: not on this node", key, ErrUnknown)
	case c.MIG:
		return Identity{Key: key}, fmt.Errorf("container %s: %w: MIG devices are isolated by the hardware", key, ErrUnknown)
	case c.Limits.Source == identity.SourceNone || c.Limits.Source == identity.SourceUnreadable:
		return Identity{Key: key}, fmt.Errorf("container %s: %w: no readable limits (%q)", key, ErrUnknown, c.Limits.Source)
	}
	var held []schedproto.UUID
	for _, u := range gpus {
		if c.GPUSource == identity.SourceNone || c.Holds(u.String()) {
			held = append(held, u)
		}
	}
	if len(held) == 0 {
		return Identity{Key: key}, fmt.Errorf("container %s: %w: none of its grant file's GPUs is its", key, ErrUnknown)
	}
	return fromLimits(key, held, c.Limits), nil
}
