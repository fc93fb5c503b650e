package timeslice

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/limitbed/limitbed/plugin/schedproto"
)

// obey plays a container's library until ctx ends: it wants the GPU, joins each slice it is
// granted and reports the drain as soon as the slice is revoked.
func obey(ctx context.Context, c *container) {
	var joined uint32
	for ctx.Err() == nil {
		c.want()
		_, s := c.state()
		switch g := c.grantID(); {
		case s == schedproto.Run && g != joined:
			joined = g
			c.setJoin(schedproto.Join{Grant: g, Joins: 1})
		case s != schedproto.Run && joined != 0:
			c.setJoin(schedproto.Join{Grant: joined, Joins: 1, Drains: 1})
		}
		time.Sleep(500 * time.Microsecond)
	}
}

func (n *node) entry(t *testing.T, key string) schedproto.GrantEntry {
	t.Helper()
	g, err := schedproto.ReadGrant(filepath.Join(n.grants, key+schedproto.GrantSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return g.GPU[0]
}

// Every beat publishes the time each container was allowed on the GPU (allowed_us, stamped with
// the beat): all the time for one never held (Free), none for one that never asks, about its
// limit's share for a busy one; a restarted scheduler goes on from the file's figure.
func TestNodePublishesAllowedTime(t *testing.T) {
	n := newNode(t)
	free := n.add("podf_main", limits("100", "force", "1"))
	idle := n.add("podi_main", limits("30", "force", "1"))
	busy := n.add("podb_main", limits("30", "force", "1"))
	_, stop := n.run(t, LimitsFiles{Dir: n.containers})
	eventually(t, "driven", func() bool {
		_, f := free.state()
		_, i := idle.state()
		return f == schedproto.Free && i == schedproto.Wait && n.entry(t, "podf_main").Counting()
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); obey(ctx, busy) }()
	time.Sleep(300 * time.Millisecond) // its first slices
	f0, b0 := n.entry(t, "podf_main"), n.entry(t, "podb_main")
	t0 := time.Now()
	time.Sleep(1500 * time.Millisecond)
	f1, i1, b1 := n.entry(t, "podf_main"), n.entry(t, "podi_main"), n.entry(t, "podb_main")
	el := time.Since(t0)
	cancel()
	wg.Wait()
	for name, e := range map[string]schedproto.GrantEntry{"free": f1, "idle": i1, "busy": b1} {
		if !e.Counting() {
			t.Errorf("%s: beat %d, allowed stamped at %d: not counting", name, e.Beat, e.AllowedBeat)
		}
	}
	share := func(a, b schedproto.GrantEntry) float64 { return float64(b.Allowed-a.Allowed) / float64(el) }
	t.Logf("allowed over %v: free %.3f, idle %v, busy 30 %% %.3f", el, share(f0, f1), i1.Allowed, share(b0, b1))
	if s := share(f0, f1); s < 0.9 || s > 1.05 {
		t.Errorf("free: allowed %.3f of the time (%v over %v), want all of it", s, f1.Allowed-f0.Allowed, el)
	}
	if i1.Allowed != 0 {
		t.Errorf("idle: allowed %v, want none: it never asked", i1.Allowed)
	}
	if s := share(b0, b1); s < 0.2 || s > 0.5 {
		t.Errorf("busy 30 %%: allowed %.3f of the time (%v over %v), want about its limit", s, b1.Allowed-b0.Allowed, el)
	}
	stop()
	before := n.entry(t, "podf_main")
	if before.State != schedproto.Off || before.Allowed < f1.Allowed {
		t.Fatalf("after shutdown: %+v, want off with at least %v", before, f1.Allowed)
	}
	_, stop = n.run(t, LimitsFiles{Dir: n.containers})
	defer stop()
	eventually(t, "the restarted scheduler counts on", func() bool {
		e := n.entry(t, "podf_main")
		return e.Counting() && e.Allowed > before.Allowed+50*time.Millisecond
	})
}

// What one beat adds: the Run or Free time, or the charge where it is more (a drain past the
// slice, a faster GPU's work); a silent loop's gap; never a charge given back.
func TestAllowanceBeat(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		state schedproto.State
		dt    time.Duration // since the last tick, under state
		used  time.Duration // the seat's charge at the beat after it
		want  time.Duration // the total then
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"run", []step{{schedproto.Run, 10 * ms, 0, 10 * ms}, {schedproto.Run, 10 * ms, 10 * ms, 20 * ms}}},
		{"free, never charged", []step{{schedproto.Free, 10 * ms, 0, 10 * ms}, {schedproto.Free, 10 * ms, 0, 20 * ms}}},
		{"wait", []step{{schedproto.Wait, 10 * ms, 0, 0}, {schedproto.Wait, 10 * ms, 0, 0}}},
		{"a drain charged past the slice", []step{{schedproto.Run, 10 * ms, 0, 10 * ms}, {schedproto.Wait, 10 * ms, 4 * ms, 14 * ms}}},
		{"a faster GPU's charge", []step{{schedproto.Run, 10 * ms, 0, 10 * ms}, {schedproto.Run, 10 * ms, 15 * ms, 25 * ms}}},
		{"a charge given back", []step{{schedproto.Run, 10 * ms, 20 * ms, 10 * ms}, {schedproto.Wait, 10 * ms, 12 * ms, 10 * ms},
			{schedproto.Wait, 10 * ms, 14 * ms, 12 * ms}}},
		{"a silent gap", []step{{schedproto.Wait, 10 * ms, 0, 0}, {schedproto.Wait, 300 * ms, 0, 300 * ms}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.add("poda_main", limits("30", "force", "1"))
			g, err := schedproto.OpenGrant(filepath.Join(n.grants, "poda_main"+schedproto.GrantSuffix))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m := &member{c: &ctr{grant: g}}
			now := time.Unix(1000, 0)
			m.allowed.tick(m, now) // the first step starts the count from the file's figure
			for i, s := range tc.steps {
				m.written = s.state
				now = now.Add(s.dt)
				m.allowed.tick(m, now)
				if got := m.allowed.beat(s.used, true); got != s.want {
					t.Fatalf("step %d: total %v, want %v", i, got, s.want)
				}
			}
		})
	}
}
