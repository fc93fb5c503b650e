// Package limitsfile renders, atomically publishes and parses the per-container
// limits file that HAMi-core reads from /overrideEnv before anything else.
//
// The format is specified in docs/limits-file.md; the shared test vectors in
// testdata/limits keep this package and the C reader in hamicore in step.
package limitsfile

import (
	"fmt"
	"strings"

	"github.com/limitbed/limitbed/plugin/libvars"
)

const (
	// FormatKey names the version line every file carries. It is sorted in
	// with the other keys, not appended, so the file stays one sorted list.
	FormatKey = libvars.LimitsFormat
	// FormatVersion is the only version this package writes.
	FormatVersion = "1"

	// Suffix is appended to "<podUID>_<container>" to form the host file name.
	Suffix = ".limits"

	// TempMarker sits between the final name and a random part in the name of
	// a temporary file (".<podUID>_<container>.limits.tmp-<random>"). The
	// leading dot keeps it from parsing as a container directory
	// ("<podUID>_<container>") and lets the monitor recognise crash debris.
	TempMarker = ".tmp-"

	// MaxLineLen is the longest line, in bytes and including the LF, that a
	// writer may produce and a reader must accept. Longer lines are bad lines.
	MaxLineLen = 4096

	// ContainerMountPath is where the file appears inside the container. It is
	// compiled into libvgpu.so (ENV_OVERRIDE_FILE) and never passed by env.
	ContainerMountPath = "/overrideEnv"

	// FileMode is the mode of the published host file: root-owned, world-readable.
	FileMode = 0o644
)

// memoryKeyPrefix starts every variable whose value is a memory quantity.
const memoryKeyPrefix = libvars.MemoryLimit

// IsMemoryKey reports whether key carries a memory quantity
// (CUDA_DEVICE_MEMORY_LIMIT or CUDA_DEVICE_MEMORY_LIMIT_<digits>).
func IsMemoryKey(key string) bool {
	if key == memoryKeyPrefix {
		return true
	}
	rest, ok := strings.CutPrefix(key, memoryKeyPrefix+"_")
	return ok && rest != "" && allDigits(rest)
}

// ParseMemory converts a memory quantity `[0-9]+[kKmMgG]?` to bytes using
// binary multipliers. No suffix means bytes. Digits are always decimal (an
// old reader's base-0 strtoul would read a leading 0 as octal, so writers
// never emit one; readers of this format must not either).
func ParseMemory(v string) (uint64, error) {
	if v == "" {
		return 0, fmt.Errorf("empty memory value")
	}
	digits, mult := v, uint64(1)
	switch v[len(v)-1] {
	case 'k', 'K':
		digits, mult = v[:len(v)-1], 1<<10
	case 'm', 'M':
		digits, mult = v[:len(v)-1], 1<<20
	case 'g', 'G':
		digits, mult = v[:len(v)-1], 1<<30
	}
	if digits == "" || !allDigits(digits) {
		return 0, fmt.Errorf("memory value %q does not match [0-9]+[kKmMgG]?", v)
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		d := uint64(digits[i] - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, fmt.Errorf("memory value %q overflows 64 bits", v)
		}
		n = n*10 + d
	}
	if mult > 1 && n > ^uint64(0)/mult {
		return 0, fmt.Errorf("memory value %q overflows 64 bits", v)
	}
	return n * mult, nil
}

// ValidKey reports whether key is a portable environment variable name,
// `[A-Za-z_][A-Za-z0-9_]*`; anything else cannot round-trip through setenv.
func ValidKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
