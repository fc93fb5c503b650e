package limitsfile

import (
	"strconv"
	"strings"

	"github.com/limitbed/limitbed/plugin/libvars"
)

// MaxDevices is how many devices a file limits: libvgpu.so reads
// CUDA_DEVICE_MEMORY_LIMIT_0.._15 and CUDA_DEVICE_SM_LIMIT_0.._15, nothing beyond.
const MaxDevices = libvars.Devices

// Policies of GPU_CORE_UTILIZATION_POLICY, as the library reads them.
const (
	PolicyDefault = "default"
	PolicyForce   = "force"
	PolicyDisable = "disable"
)

// Resolved is what libvgpu.so enforces for a file in file mode, where the
// file alone governs every limit (the process's environment is ignored):
// the Go twin of the C resolver (hamicore/src/limitsfile_resolve.c), held to
// it by the shared vectors' resolved.env (TestResolvedVectors). Node
// components judge a container by this, never by what its region says.
type Resolved struct {
	// Memory is each device's limit in bytes (index = CUDA ordinal):
	// Unlimited when no limit applies, 0 when every allocation is refused
	// (the file set the limit to a value outside the grammar).
	Memory [MaxDevices]uint64
	// SM is each device's compute limit in percent, 1..100 (100: none).
	SM       [MaxDevices]uint32
	Policy   string // PolicyDefault, PolicyForce or PolicyDisable
	Priority int32  // CUDA_TASK_PRIORITY: a lower number is a higher priority
	// Oversubscribe is CUDA_OVERSUBSCRIBE.
	Oversubscribe bool
}

// Unlimited marks a device without a memory limit.
const Unlimited = ^uint64(0)

// DefaultPriority is the library's CUDA_TASK_PRIORITY when the file has none.
const DefaultPriority = 1

// Resolve applies the library's rules to a parsed file: a device's own
// memory limit when it is above 0, else the global CUDA_DEVICE_MEMORY_LIMIT
// when above 0, else none ("0" means no limit, as in HAMi); a memory key whose
// every line was rejected refuses every allocation of the devices it covers.
// The compute limit is a percentage (0 and 100: none; anything else outside
// 0..100: none, with the library's warning); the policy is default unless
// force or disable; the priority an integer, else 1.
func Resolve(p *Parsed) Resolved {
	var r Resolved
	global, gstate := memVar(p, memoryKeyPrefix)
	for i := 0; i < MaxDevices; i++ {
		b, st := memVar(p, memoryKeyPrefix+"_"+strconv.Itoa(i))
		switch {
		case st == memValid && b > 0:
			r.Memory[i] = b
		case st == memRejected:
			r.Memory[i] = 0
		case gstate == memValid && global > 0:
			r.Memory[i] = global
		case gstate == memRejected:
			r.Memory[i] = 0
		default:
			r.Memory[i] = Unlimited
		}
	}
	gsm := uint32(100)
	if v, ok := p.Vars[libvars.SMLimit]; ok {
		gsm = percent(v)
	}
	for i := 0; i < MaxDevices; i++ {
		r.SM[i] = gsm
		if v, ok := p.Vars[libvars.SMLimitOf(i)]; ok {
			r.SM[i] = percent(v)
		}
	}
	r.Policy = PolicyDefault
	switch p.Vars[libvars.CorePolicy] {
	case "force", "FORCE":
		r.Policy = PolicyForce
	case "disable", "DISABLE":
		r.Policy = PolicyDisable
	}
	r.Priority = DefaultPriority
	if v, ok := p.Vars[libvars.TaskPriority]; ok {
		if n, ok := boundedUint(strings.TrimPrefix(v, "-"), 1000000); ok {
			r.Priority = int32(n)
			if strings.HasPrefix(v, "-") {
				r.Priority = -int32(n)
			}
		}
	}
	switch p.Vars[libvars.Oversubscribe] {
	case "true", "TRUE", "True", "1":
		r.Oversubscribe = true
	}
	return r
}

const (
	memAbsent = iota
	memValid
	memRejected
)

func memVar(p *Parsed, key string) (uint64, int) {
	if v, ok := p.Vars[key]; ok {
		if b, err := ParseMemory(v); err == nil {
			return b, memValid
		}
		return 0, memRejected
	}
	if p.Rejected[key] {
		return 0, memRejected
	}
	return 0, memAbsent
}

// percent reads a compute limit as the library does: 0..100, 0 meaning 100.
func percent(v string) uint32 {
	n, ok := boundedUint(v, 100)
	if !ok || n == 0 {
		return 100
	}
	return n
}

// boundedUint parses decimal digits up to max (the library's parse_uint).
func boundedUint(s string, max uint64) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + uint64(s[i]-'0')
		if v > max {
			return 0, false
		}
	}
	return uint32(v), true
}
