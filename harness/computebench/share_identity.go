package computebench

import (
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/identity"
)

// scenarioIdentity is the node's record of a scenario's containers, as the device plugin and the
// kubelet would give it to the monitor: each container's GPU (by the fakegpu profile's UUID), its
// compute limit, policy and priority. The monitor's compute-policy pass takes a container's GPUs
// and priority from it, never from the container's region (docs/plugin.md).
func scenarioIdentity(sc Scenario, gpuEnv []string) (staticIdentity, error) {
	env := envMap(gpuEnv)
	gpus, err := node.ReadProfile(filepath.Join(env["FAKEGPU_PROFILE_DIR"], env["FAKEGPU_PROFILE"]+".profile"))
	if err != nil {
		return staticIdentity{}, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	var cs []*identity.Container
	for _, c := range sc.Containers {
		if c.Policy == "none" {
			continue // no library: nothing the pass decides for it
		}
		if c.GPU < 0 || c.GPU >= len(gpus) {
			return staticIdentity{}, fmt.Errorf("scenario %s: container %s: GPU %d, the profile has %d", sc.Name, c.Name, c.GPU, len(gpus))
		}
		cs = append(cs, &identity.Container{
			Key:       identity.Key{PodUID: types.UID(c.Name), Container: "main"},
			GPUs:      []identity.GPU{{UUID: gpus[c.GPU].UUID}},
			GPUSource: identity.SourceFile,
			Ordered:   true,
			Limits: identity.Limits{Source: identity.SourceFile, SM: uint32(c.Limit), Policy: c.Policy,
				Priority: int32(c.Priority)},
		})
	}
	return staticIdentity{identity.NewSnapshot(time.Now(), cs)}, nil
}
