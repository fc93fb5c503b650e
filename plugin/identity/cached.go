package identity

import (
	"context"
	"sync"
	"time"
)

// SnapshotSource is anything that takes snapshots (*Sources is one).
type SnapshotSource interface {
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// Cached shares one snapshot among the node's passes of one period (the
// monitor's compute policy and its accounting both run every second): a
// snapshot younger than MaxAge is handed out again, an older one is
// retaken. A failure is not cached.
type Cached struct {
	Source SnapshotSource
	MaxAge time.Duration
	Now    func() time.Time

	mu   sync.Mutex
	snap *Snapshot
	at   time.Time
}

// Snapshot implements SnapshotSource.
func (c *Cached) Snapshot(ctx context.Context) (*Snapshot, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != nil && now().Sub(c.at) < c.MaxAge {
		return c.snap, nil
	}
	s, err := c.Source.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c.snap, c.at = s, now()
	return s, nil
}
