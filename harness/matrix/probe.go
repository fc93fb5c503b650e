package matrix

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

// Limits of every matrix pod.
const (
	LimitMiB   = 3000 // nvidia.com/gpumem
	RequestMiB = 4096 // what the probe asks for
)

// Observation is what one cell's process showed.
type Observation struct {
	Refused    bool   `json:"refused"`     // the 4096 MiB allocation failed
	GrantedMiB int    `json:"granted_mib"` // what it got
	Error      string `json:"error,omitempty"`
	TotalMiB   int    `json:"total_mib"` // gpuinfo's memory total
	// SMITotalMiB is the real nvidia-smi's memory total (plugin/nvsmi); SMIMissing: the workload
	// image has no nvidia-smi, so that check was not made; SMIErr: what it printed instead.
	SMITotalMiB int    `json:"nvidia_smi_total_mib"`
	SMIMissing  bool   `json:"nvidia_smi_missing,omitempty"`
	SMIErr      string `json:"nvidia_smi_error,omitempty"`
	Joined      bool   `json:"joined"` // the holder's pid is a live slot of the pod's usage.cache
	HolderPID   int    `json:"holder_pid"`
	RegionPIDs  []int  `json:"region_pids"` // pids of the region's live slots
	RegionErr   string `json:"region_error,omitempty"`
}

// Enforced is the cell's verdict: every check says the limit applies (nvidia-smi's where the image
// has it).
func (o Observation) Enforced() bool {
	return o.Refused && o.TotalMiB == LimitMiB && o.Joined && (o.SMIMissing || o.SMIErr == "" && o.SMITotalMiB == LimitMiB)
}

// Escaped: none of the checks shows the limit.
func (o Observation) Escaped() bool {
	return !o.Refused && o.TotalMiB != LimitMiB && !o.Joined && (o.SMIMissing || o.SMIErr == "" && o.SMITotalMiB != LimitMiB)
}

// jobCommand is what every cell runs through its launch method: the refused-allocation probe, the
// NVML view (gpuinfo's, and the real nvidia-smi's where the workload image has it: its standard
// output only, a library's log lines on standard error must not garble it), then a small
// allocation held while regiondump reads the pod's region (a dead process's slot may be reclaimed
// by the next one, so the holder must be alive). regiondump decodes limitbed's layout and upstream
// HAMi-core's (plugin/region), so a real old core is judged too. Tools are called by absolute path:
// cron's PATH lacks /usr/local/bin.
func jobCommand(cache string) string {
	b := node.ToolDir
	region := `echo "region-error no shared cache in the allocation"`
	if cache != "" {
		region = fmt.Sprintf(`echo "region $(%s/regiondump %s 2>&1 | tr '\n' ' ')"`, b, cache)
	}
	return fmt.Sprintf(`B=%s
echo "probe $($B/cudaprobe --mib %d)"
echo "gpuinfo $($B/gpuinfo --json)"
if [ -x %s ]; then echo "smi $(%s 2>/dev/null | tr '\n' ' ')"; else echo smi-missing; fi
H=$(mktemp)
$B/cudaprobe --mib 16 --hold 60 > "$H" &
hp=$!
i=0
while ! grep -q '^{' "$H" && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo "holder $(head -n1 "$H")"
%s
kill $hp 2>/dev/null
wait $hp 2>/dev/null
rm -f "$H"
exit 0`, b, RequestMiB, nvsmi.ContainerPath, nvsmi.TotalsCommand(nvsmi.ContainerPath), region)
}

type probeLine struct {
	RequestedMiB int     `json:"requested_mib"`
	GrantedMiB   int     `json:"granted_mib"`
	Error        *string `json:"error"`
	TotalMiB     int     `json:"total_mib"`
	PID          int     `json:"pid"`
}

type gpuinfoLine struct {
	Devices []struct {
		Total int `json:"memory_total_mib"`
	} `json:"devices"`
}

// regionLine is the part of regiondump's output (plugin/region's Region) the check reads.
type regionLine struct {
	Layout struct {
		Name string `json:"name"`
	} `json:"layout"`
	Slots []struct {
		PID   int  `json:"pid"`
		Alive bool `json:"alive"`
	} `json:"slots"`
}

// parseJob reads jobCommand's tagged output.
func parseJob(stdout []byte) (Observation, error) {
	var o Observation
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		tag, body, _ := strings.Cut(sc.Text(), " ")
		seen[tag] = true
		switch tag {
		case "probe":
			var p probeLine
			if err := json.Unmarshal([]byte(body), &p); err != nil {
				return o, fmt.Errorf("cudaprobe output %q: %w", body, err)
			}
			o.GrantedMiB = p.GrantedMiB
			if p.Error != nil {
				o.Error = *p.Error
			}
			o.Refused = p.Error != nil && p.GrantedMiB < p.RequestedMiB
		case "gpuinfo":
			var g gpuinfoLine
			if err := json.Unmarshal([]byte(body), &g); err != nil || len(g.Devices) == 0 {
				return o, fmt.Errorf("gpuinfo output %q: no device (%v)", body, err)
			}
			o.TotalMiB = g.Devices[0].Total
		case "smi":
			totals, err := nvsmi.ParseTotals([]byte(body))
			if err != nil {
				o.SMIErr = strings.TrimSpace(body)
				continue
			}
			o.SMITotalMiB = int(totals[0])
		case "smi-missing":
			o.SMIMissing = true
		case "holder":
			var p probeLine
			if err := json.Unmarshal([]byte(body), &p); err != nil {
				return o, fmt.Errorf("holder output %q: %w", body, err)
			}
			o.HolderPID = p.PID
		case "region":
			var r regionLine
			if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &r); err != nil {
				o.RegionErr = strings.TrimSpace(body)
				continue
			}
			if r.Layout.Name == "" {
				o.RegionErr = "regiondump printed no layout: " + strings.TrimSpace(body)
				continue
			}
			for _, s := range r.Slots {
				if s.Alive {
					o.RegionPIDs = append(o.RegionPIDs, s.PID)
				}
			}
		case "region-error":
			o.RegionErr = body
		}
	}
	if !seen["smi"] && !seen["smi-missing"] {
		return o, fmt.Errorf("no nvidia-smi line in the job's output:\n%s", stdout)
	}
	for _, tag := range []string{"probe", "gpuinfo", "holder"} {
		if !seen[tag] {
			return o, fmt.Errorf("no %q line in the job's output:\n%s", tag, stdout)
		}
	}
	for _, pid := range o.RegionPIDs {
		if pid == o.HolderPID && pid != 0 {
			o.Joined = true
		}
	}
	return o, nil
}
