package monitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// DefaultGrace is how old an entry must be before a sweep may remove it
// (upstream uses its 5 minute resync interval the same way). It protects
// files the plugin creates for a pod the API snapshot does not show yet.
const DefaultGrace = 5 * time.Minute

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
// alone.
func ParseEntry(name string, isDir bool) (Entry, bool) {
	if base, ok := limitsfile.TempOwner(name); ok && !isDir {
		e, ok := parseKey(strings.TrimSuffix(base, limitsfile.Suffix))
		e.Name, e.Kind = name, KindTemp
		return e, ok && strings.HasSuffix(base, limitsfile.Suffix)
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
	uid, ctr, ok := strings.Cut(key, "_")
	if !ok || uid == "" || ctr == "" {
		return Entry{}, false
	}
	return Entry{PodUID: types.UID(uid), Container: ctr}, true
}

// Sweeper removes what dead pods left in the containers directory.
type Sweeper struct {
	Dir     string // <HOOK_PATH>/vgpu/containers
	API     PodLister
	Kubelet PodResourcesLister // may be nil
	Grace   time.Duration
	Now     func() time.Time // nil: time.Now
	Logger  klog.Logger
	// OnRemove is called after each removal (metrics); may be nil.
	OnRemove func(Kind)
}

// Result counts what one sweep did.
type Result struct {
	Removed map[Kind]int
}

// Sweep runs once. It never removes an entry whose pod may be alive, nor
// one younger than the grace period (by mtime), so an Allocate that races
// the sweep keeps its files. Temporary files are debris once older than
// the grace period whatever the pod's state: a write takes milliseconds.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	res := Result{Removed: map[Kind]int{}}
	live, err := Snapshot(ctx, s.API, s.Kubelet)
	if err != nil {
		return res, fmt.Errorf("sweep %s: %w", s.Dir, err)
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return res, fmt.Errorf("sweep %s: %w", s.Dir, err)
	}
	var errs []error
	for _, de := range entries {
		e, ok := ParseEntry(de.Name(), de.IsDir())
		if !ok || (e.Kind != KindTemp && live.Alive(e.PodUID)) {
			continue
		}
		path := filepath.Join(s.Dir, e.Name)
		// Stat just before removing: the check and the removal are as close
		// as they can be without a lock shared with the plugin.
		if !s.old(path) {
			continue
		}
		if err := remove(path, e.Kind); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed[e.Kind]++
		if s.OnRemove != nil {
			s.OnRemove(e.Kind)
		}
		s.Logger.V(2).Info("Removed stale entry", "path", path, "kind", e.Kind, "podUID", e.PodUID)
	}
	return res, errors.Join(errs...)
}

func (s *Sweeper) old(path string) bool {
	st, err := os.Lstat(path)
	if err != nil {
		return false
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	return now().Sub(st.ModTime()) >= s.Grace
}

func remove(path string, k Kind) error {
	var err error
	if k == KindDir {
		err = os.RemoveAll(path)
	} else {
		err = os.Remove(path)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
