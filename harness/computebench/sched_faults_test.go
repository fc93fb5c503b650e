package computebench_test

import (
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
)

// A process that dies while its work runs under its container's slice (a benchmark killing its
// own worker, GPU-Virt-Bench's IS-LOAD-GEN; a crash) never reports that slice's drain. Its
// container's other processes go on at their share, alone on the GPU and beside a neighbour: the
// node learns the joiner is gone from the kernel (its lock on the report), not from the dead
// process. Before, a container alone on its GPU waited for that drain for ever.
func TestSchedulerSurvivesADeadJoiner(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	sc := onGPUs("dead-joiner", computebench.ScenarioSeconds+2,
		scenario("alone", computebench.Container{Name: "c30", Policy: "force", Limit: 30, Procs: 2, Die: 3 * time.Second}),
		scenario("beside", computebench.Container{Name: "c30", Policy: "force", Limit: 30, Procs: 2, Die: 3 * time.Second},
			computebench.Container{Name: "c50", Policy: "force", Limit: 50}),
		scenario("burst-alone", computebench.Container{Name: "b30", Policy: "force", Limit: 30, Procs: 2, Workload: "burst",
			Die: 3 * time.Second}))
	sharetest.RequireShares(t, sharetest.Run(t, r, sc, sharetest.Tolerance))
}
