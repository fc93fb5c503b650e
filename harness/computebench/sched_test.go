package computebench_test

import (
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
	"github.com/limitbed/limitbed/harness/sandbox/sandboxtest"
	"github.com/limitbed/limitbed/internal/cbuild"
)

// scheduled is a runner whose containers run as on a node with vgpu-scheduler (root: private
// mount namespaces; skipped without it, except under CI=true).
func scheduled(t *testing.T) (*computebench.SharedRunner, *computebench.Scheduled) {
	t.Helper()
	sandboxtest.Host(t)
	r := sharetest.Runner(t)
	s := &computebench.Scheduled{Privatens: filepath.Join(cbuild.RepoRoot(), "hamicore", "test", "privatens"), Logger: klog.Background().V(2)}
	r.Prepare = s.Prepare
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return r, s
}

func TestSchedDebug(t *testing.T) {
	r, s := scheduled(t)
	r.BaselineSeconds = 3
	sc := computebench.Scenarios()["force-30-50-uniform"]
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
				for dir, g := range s.Stats() {
					for u, rep := range g {
						t.Logf("%s %s %+v %+v", filepath.Base(filepath.Dir(dir)), u, rep.GPU, rep.Seats)
					}
				}
			}
		}
	}()
	res := sharetest.Run(t, r, sc, sharetest.Tolerance)
	close(done)
	sharetest.RequireShares(t, res)
}
