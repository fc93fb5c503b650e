package timeslice

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/schedproto"
)

// ErrUnknown wraps the error of a container the source cannot identify: it is not scheduled (its
// grant entries stay Off and its library paces itself).
var ErrUnknown = errors.New("identity unknown")

// Source gives the trusted identity of a container: its limits, policy and priority, from
// records the container cannot write. gpus are its GPUs from its grant file (the device plugin's
// record of what it allocated). It is the one seam through which the scheduler learns who a
// container is.
type Source interface {
	Identify(key string, gpus []schedproto.UUID) (Identity, error)
}

// LimitsFiles identifies a container from the device plugin's limits file,
// <Dir>/<key>.limits (root-owned; the container sees it read-only at /overrideEnv).
type LimitsFiles struct {
	Dir string // <HOOK_PATH>/vgpu/containers
}

// maxLimitsFile bounds what is read (the plugin writes a few hundred bytes).
const maxLimitsFile = 64 << 10

// Identify implements Source. A limits file that cannot be read is an ErrUnknown; a value the
// library would not understand is an error too, but the identity returned with it is the
// strictest reading (force, the lowest priority), which the caller schedules.
func (l LimitsFiles) Identify(key string, gpus []schedproto.UUID) (Identity, error) {
	id := Identity{Key: key, GPUs: gpus, Policy: PolicyDefault, Priority: 1}
	path := filepath.Join(l.Dir, key+limitsfile.Suffix)
	b, err := os.ReadFile(path)
	if err != nil {
		return id, fmt.Errorf("container %s: %w: %w", key, ErrUnknown, err)
	}
	if len(b) > maxLimitsFile {
		return id, fmt.Errorf("container %s: %w: %s is %d bytes, more than a limits file", key, ErrUnknown, path, len(b))
	}
	vars := limitsfile.Parse(b).Vars
	var errs []error
	if v, ok := vars["CUDA_DEVICE_SM_LIMIT"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("CUDA_DEVICE_SM_LIMIT %q is not a percentage", v))
			n = 1 // the strictest limit that still lets it run
		}
		id.Limit = n
	}
	if id.Policy, err = ParsePolicy(vars["GPU_CORE_UTILIZATION_POLICY"]); err != nil {
		errs = append(errs, err)
		id.Policy = PolicyForce
	}
	if id.Priority, err = ParsePriority(vars["CUDA_TASK_PRIORITY"]); err != nil {
		errs = append(errs, err)
		id.Priority = math.MaxInt32
	}
	if err := errors.Join(errs...); err != nil {
		return id, fmt.Errorf("container %s: %s: %w; scheduled as %s at limit %d, priority %d", key, path, err, id.Policy, id.Limit, id.Priority)
	}
	return id, nil
}
