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

// A tenant that puts something else in its scheduler report's place (a symlink, a directory, a
// short file) before its processes start: the node reads it as always busy, its processes obey
// their grant all the same. Before, the node left it out of the slices, its processes paced
// themselves beside them and the 50 % neighbour lost about 0.15 of the GPU.
func TestSchedulerReportPlanted(t *testing.T) {
	t.Parallel()
	r, _ := scheduled(t)
	var groups []computebench.Scenario
	for _, plant := range computebench.ReportPlants {
		groups = append(groups, scenario(plant,
			// Charged whole from each grant (its launchers' wake-up is its own loss) and a drain
			// it cannot report: a little under its 30 %, never over: 0.27 ± the tolerance.
			computebench.Container{Name: "tenant", Policy: "force", Limit: 30, Report: plant, Want: 0.27},
			computebench.Container{Name: "neighbour", Policy: "force", Limit: 50}))
	}
	sharetest.RequireShares(t, sharetest.Run(t, r, onGPUs("report-planted", computebench.ScenarioSeconds, groups...), sharetest.Tolerance))
}
