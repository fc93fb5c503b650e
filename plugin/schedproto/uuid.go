package schedproto

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// UUID is a GPU's UUID in the 16 bytes cuDeviceGetUuid returns.
type UUID [16]byte

// ParseUUID reads NVML's form of a GPU UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the
// form the device plugin's records hold), into its 16 bytes.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok {
		return u, fmt.Errorf("GPU UUID %q does not start with \"GPU-\"", s)
	}
	hexs := strings.ReplaceAll(rest, "-", "")
	if len(hexs) != 32 {
		return u, fmt.Errorf("GPU UUID %q has %d hex digits, want 32", s, len(hexs))
	}
	var v UUID
	if _, err := hex.Decode(v[:], []byte(hexs)); err != nil {
		return u, fmt.Errorf("GPU UUID %q: %w", s, err)
	}
	return v, nil
}

func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// IsZero reports an unused entry.
func (u UUID) IsZero() bool { return u == UUID{} }
