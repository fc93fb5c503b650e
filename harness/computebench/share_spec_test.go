//go:build sharedspec

package computebench_test

import (
	"os"
	"sort"
	"testing"

	"github.com/limitbed/limitbed/harness/computebench"
	"github.com/limitbed/limitbed/harness/computebench/sharetest"
)

// The compute limit's shared-GPU specification (issue 21, "Must show"): every named scenario but
// the 8-GPU benchmarks, each judged container within ± 0.03 in every 10 s window after its first
// 2 s, judged by fakegpu's record of completed work, with NVML's per-process samples as an H200
// gives them (FAKEGPU_NVML_SAMPLES=periodic; LIMITBED_SPEC_SAMPLES=exact for fakegpu's exact
// ones). EXPECTED TO FAIL until the per-GPU scheduler lands: the controller closed on NVML's
// samples does not hold two containers on one GPU (docs/benchmarks.md, "Shared GPUs on fakegpu").
// Hence the build tag, so that make test neither runs nor counts it:
//
//	go test -tags sharedspec -run TestSharedGPUSpecification -v -timeout 30m ./harness/computebench/
//
// (-run 'TestSharedGPUSpecification/force-30-50' picks scenarios.)
func TestSharedGPUSpecification(t *testing.T) {
	samples := os.Getenv("LIMITBED_SPEC_SAMPLES")
	if samples == "" {
		samples = "periodic"
	}
	r := sharetest.Runner(t)
	r.Env = append(r.Env, "FAKEGPU_NVML_SAMPLES="+samples)
	all := computebench.Scenarios()
	var names []string
	for n, sc := range all {
		if sc.Profile != "8x-h100-80g" { // the 8-GPU scenarios are the scheduler's
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			sharetest.RequireShares(t, sharetest.Run(t, r, all[n], sharetest.Tolerance))
		})
	}
}
