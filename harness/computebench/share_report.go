package computebench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ReportShared writes one line per container (its spec, unthrottled rate, 1 s windows after its
// first 2 s and 10 s windows as ranges, the band it is judged against, the verdict), each GPU's
// busy fraction, and with perWindow every 1 s share and busy fraction (and each container's longest
// stall).
func ReportShared(w io.Writer, r *Result, perWindow bool) {
	fmt.Fprintf(w, "scenario %s on %s, %.0f s: share = completed work / the workload's unthrottled rate\n", r.Scenario, r.Profile, r.Seconds)
	fmt.Fprintf(w, "%-12s %3s %-8s %5s %4s %6s %-8s %6s %-13s %-13s %-11s %s\n", "container", "gpu", "policy", "limit", "prio",
		"start", "workload", "unthr.", "1 s windows", "10 s windows", "want", "verdict")
	for _, c := range r.Containers {
		one := c.Windows
		if len(one) > SkipWindows {
			one = one[SkipWindows:]
		}
		want, verdict := "-", "not judged"
		if c.Judged {
			want, verdict = fmt.Sprintf("%.2f..%.2f", c.Lo, c.Hi), "ok"
			if c.Hi > 100 {
				want = fmt.Sprintf(">= %.2f", c.Lo)
			}
			if !c.OK {
				verdict = "OUT OF BOUNDS"
			}
		}
		fmt.Fprintf(w, "%-12s %3d %-8s %4d%% %4d %6s %-8s %6.3f %-13s %-13s %-11s %s\n", c.Name, c.GPU, c.Policy, c.Limit,
			c.Priority, c.Start, c.Workload, c.Unthrottled, span(one), span(c.Long), want, verdict)
		if perWindow {
			stall := "none seen"
			if c.LongestStall > 0 {
				stall = fmt.Sprintf("%s at %.2f s", c.LongestStall.Round(time.Millisecond), c.LongestStallAt.Seconds())
			}
			fmt.Fprintf(w, "    1 s: %s; longest stall after 2 s: %s\n", joinFloats(c.Windows), stall)
		}
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "GPU %d busy: mean %.3f, 1 s windows %s\n", g.GPU, mean(g.Busy), span(g.Busy))
		if perWindow {
			fmt.Fprintf(w, "    1 s: %s\n", joinFloats(g.Busy))
		}
	}
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(s, " ")
}
