package monitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// DefaultGrace is how long an entry must have been seen removable before a
// sweep removes it (upstream waited its 5 minute resync interval the same
// way). It is measured by the monitor's own clock from the first sweep that
// found the entry's pod dead, never by the entry's times: those are the
// container's to set (a cache directory stamped in the future was never
// collected).
const DefaultGrace = 5 * time.Minute

// DefaultSweepAPITimeout bounds one sweep's liveness queries.
const DefaultSweepAPITimeout = 30 * time.Second

// MinTempGrace is the least time a temporary file must have been seen
// before it is removed, whatever Grace says: a temporary file is not tied to
// a pod's life, and one seen now may be a write in flight (it takes
// milliseconds; a minute is debris).
const MinTempGrace = time.Minute

// Kind classifies an entry of the containers directory.
type Kind string

// Entry kinds.
const (
	KindDir    Kind = "dir"    // <podUID>_<container>
	KindLimits Kind = "limits" // <podUID>_<container>.limits
	KindTemp   Kind = "temp"   // .<podUID>_<container>.limits.tmp-<random>
)

// Entry is a parsed name in the containers directory.
type Entry struct {
	Name      string
	Kind      Kind
	PodUID    types.UID
	Container string
}

// ParseEntry classifies name; ok is false for names the monitor must leave
// alone: anything the plugin's paths.ContainerKey could not have made, so
// only a valid pod UID and container name reach a path or a metric label.
func ParseEntry(name string, isDir bool) (Entry, bool) {
	if base, ok := limitsfile.TempOwner(name); ok && !isDir {
		key, ok := strings.CutSuffix(base, limitsfile.Suffix)
		e, valid := parseKey(key)
		e.Name, e.Kind = name, KindTemp
		return e, ok && valid
	}
	if strings.HasPrefix(name, ".") {
		return Entry{}, false
	}
	if isDir {
		e, ok := parseKey(name)
		e.Name, e.Kind = name, KindDir
		return e, ok
	}
	if key, ok := strings.CutSuffix(name, limitsfile.Suffix); ok {
		e, ok := parseKey(key)
		e.Name, e.Kind = name, KindLimits
		return e, ok
	}
	return Entry{}, false
}

func parseKey(key string) (Entry, bool) {
	uid, ctr, err := paths.ParseContainerKey(key)
	if err != nil {
		return Entry{}, false
	}
	return Entry{PodUID: types.UID(uid), Container: ctr}, true
}

// Sweeper removes what dead pods left in the containers directory. Whether
// an entry goes is decided by its pod's life in the API server and the
// kubelet, and by how long the monitor has seen it dead, never by anything
// the container controls: the entry's times, its contents or their shape.
type Sweeper struct {
	Dir     string // <HOOK_PATH>/vgpu/containers
	API     PodLister
	Kubelet PodResourcesLister // may be nil
	// Grace is how long an entry must have been seen removable, by the
	// monitor's clock, before it is removed; 0 removes it at once.
	Grace time.Duration
	// APITimeout bounds the liveness queries of one sweep; 0 means
	// DefaultSweepAPITimeout.
	APITimeout time.Duration
	Now        func() time.Time // nil: time.Now
	Logger     klog.Logger
	// OnRemove is called after each removal (metrics); may be nil.
	OnRemove func(Kind)

	mu        sync.Mutex
	deadSince map[string]time.Time // entry name -> first sweep that found it removable
}

// Result counts what one sweep did.
type Result struct {
	Removed map[Kind]int
}

// Sweep runs once. It lists the directory first and asks who is alive
// second: an entry listed was made by an Allocate that had already read its
// pod from the API server, so the snapshot taken after it shows that pod
// unless the pod is gone. It never removes an entry whose pod may be alive.
// Temporary files are debris whatever the pod's state (a write takes
// milliseconds), once seen for the grace period. A directory is removed at
// any depth without following links (safefile.RemoveTree).
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	res := Result{Removed: map[Kind]int{}}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return res, fmt.Errorf("sweep %s: %w", s.Dir, err)
	}
	timeout := s.APITimeout
	if timeout <= 0 {
		timeout = DefaultSweepAPITimeout
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	live, err := Snapshot(qctx, s.API, s.Kubelet)
	cancel()
	if err != nil {
		return res, fmt.Errorf("sweep %s: %w", s.Dir, err)
	}
	var errs []error
	for _, e := range s.due(entries, live) {
		path := filepath.Join(s.Dir, e.Name)
		if err := remove(path, e.Kind); err != nil {
			errs = append(errs, err)
			continue
		}
		s.forget(e.Name)
		res.Removed[e.Kind]++
		if s.OnRemove != nil {
			s.OnRemove(e.Kind)
		}
		s.Logger.V(2).Info("Removed stale entry", "path", path, "kind", e.Kind, "podUID", e.PodUID)
	}
	return res, errors.Join(errs...)
}

// due returns the listed entries that have been removable for the grace
// period, and records when each removable entry was first seen so.
func (s *Sweeper) due(entries []os.DirEntry, live Liveness) []Entry {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deadSince == nil {
		s.deadSince = map[string]time.Time{}
	}
	seen := map[string]bool{}
	var out []Entry
	for _, de := range entries {
		e, ok := ParseEntry(de.Name(), de.IsDir())
		if !ok || (e.Kind != KindTemp && live.Alive(e.PodUID)) {
			continue
		}
		seen[e.Name] = true
		first, ok := s.deadSince[e.Name]
		if !ok {
			first = now
			s.deadSince[e.Name] = now
		}
		grace := s.Grace
		if e.Kind == KindTemp {
			grace = max(grace, MinTempGrace)
		}
		if now.Sub(first) >= grace {
			out = append(out, e)
		}
	}
	// Only entries still listed and removable are remembered: the map is
	// as large as the directory at most.
	for name := range s.deadSince {
		if !seen[name] {
			delete(s.deadSince, name)
		}
	}
	return out
}

func (s *Sweeper) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.deadSince, name)
}

func remove(path string, k Kind) error {
	var err error
	if k == KindDir {
		err = safefile.RemoveTree(path)
	} else {
		err = os.Remove(path)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
