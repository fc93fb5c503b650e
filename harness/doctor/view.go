package doctor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseTotals reads the memory total of every GPU, in MiB, from `gpuinfo --json` (one JSON object
// with devices[].memory_total_mib) or from `nvidia-smi --query-gpu=memory.total
// --format=csv,noheader,nounits` (one number per line).
func parseTotals(out []byte) ([]uint64, error) {
	s := strings.TrimSpace(string(out))
	if strings.HasPrefix(s, "{") {
		var v struct {
			Devices []struct {
				Total *uint64 `json:"memory_total_mib"`
			} `json:"devices"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("gpuinfo --json output does not parse: %w", err)
		}
		out := make([]uint64, 0, len(v.Devices))
		for i, d := range v.Devices {
			if d.Total == nil {
				return nil, fmt.Errorf("gpuinfo --json: device %d has no memory_total_mib", i)
			}
			out = append(out, *d.Total)
		}
		return out, nil
	}
	var totals []uint64
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(strings.TrimSuffix(line, "MiB")), " "), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi memory.total line %q is not a number of MiB", line)
		}
		totals = append(totals, n)
	}
	if len(totals) == 0 {
		return nil, fmt.Errorf("the GPU tool printed no device")
	}
	return totals, nil
}
