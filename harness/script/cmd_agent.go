package script

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limitbed/limitbed/harness/matrix/node"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/monitor/metricname"
)

const monitorUsage = "monitor sweep | monitor scrape | monitor start [--enforcement=report|kill] [--period=DURATION] [--allowance=MEM] [--env=K=V]... | " +
	"monitor stop | monitor driver | monitor over POD [--holder=NAME] [--within=PERIODS] | ! monitor over POD | monitor events POD"

var (
	monitorBinOnce sync.Once
	monitorBin     string
	monitorBinErr  error
)

// monitorBinary builds plugin/cmd/vgpu-monitor once per test process.
func monitorBinary(root string) (string, error) {
	monitorBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "limitbed-monitor-")
		if err != nil {
			monitorBinErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		monitorBin, monitorBinErr = node.BuildBinary(ctx, root, dir, "vgpu-monitor")
	})
	return monitorBin, monitorBinErr
}

// cmdMonitorAgent drives the vgpu-monitor binary on the script's node (a node started with
// plugin start --http-api): start and stop it; print its driver-truth metrics per pod ("driver");
// wait until a pod is over its limit by the driver's count, within PERIODS accounting periods of
// a holder's grant ("over"; negated: judged within its limit within PERIODS periods); print the Events recorded
// on a pod, read back through the API server ("events").
func cmdMonitorAgent(ts *testscript.TestScript, neg bool, args []string) {
	st := getState(ts)
	if st.node == nil {
		ts.Fatalf("monitor %s: no node (plugin start --http-api first)", args[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch args[0] {
	case "start":
		fs := flag.NewFlagSet("monitor start", flag.ContinueOnError)
		enf := fs.String("enforcement", "report", "")
		period := fs.Duration("period", time.Second, "")
		allowance := fs.String("allowance", "", "")
		var envs multiFlag
		fs.Var(&envs, "env", "")
		parseFlags(ts, monitorUsage, fs, args[1:], 0)
		if neg || !v1.Enforcement(*enf).Valid() || st.monitor != nil {
			ts.Fatalf("monitor start: enforcement %q, running %v\nusage: %s", *enf, st.monitor != nil, monitorUsage)
		}
		bin, err := monitorBinary(st.root)
		ts.Check(err)
		m, err := st.node.StartMonitor(ctx, node.MonitorConfig{Binary: bin, Enforcement: v1.Enforcement(*enf), Period: *period, ContextAllowance: *allowance, Env: envs})
		ts.Check(err)
		st.monitor = m
	case "stop":
		st.agent(ts).Stop()
		st.monitor = nil
	case "driver":
		for _, l := range st.driverLines(ts, ctx) {
			fmt.Fprintln(ts.Stdout(), l)
		}
	case "over":
		st.monitorOver(ts, ctx, neg, args[1:])
	case "events":
		if len(args) != 2 {
			ts.Fatalf("usage: %s", monitorUsage)
		}
		evs, err := st.node.Kube().CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		ts.Check(err)
		var lines []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == args[1] {
				lines = append(lines, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
			}
		}
		fmt.Fprintf(ts.Stdout(), "events of %s: %d\n", args[1], len(lines))
		for _, l := range lines {
			fmt.Fprintln(ts.Stdout(), l)
		}
	default:
		ts.Fatalf("usage: %s", monitorUsage)
	}
}

func (st *state) agent(ts *testscript.TestScript) *node.Monitor {
	if st.monitor == nil {
		ts.Fatalf("no monitor running (monitor start first)")
	}
	return st.monitor
}

// driverMetric matches a sample of the monitor's driver-truth metrics, by their names.
var driverMetric = regexp.MustCompile(`^(` + strings.Join([]string{metricname.DriverMemory, metricname.DriverMemoryBound,
	metricname.DriverMemoryOverLimit, metricname.DriverProcesses, metricname.DriverProcessMemory,
	metricname.DriverUnattributed, metricname.DriverKills, metricname.DriverPIDChanged}, "|") + `)\{(.*)\} (\S+)$`)
var labelRE = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)

// driverLines renders the monitor's driver-truth metrics: "POD METRIC LABEL=VALUE... VALUE",
// POD the script's pod name ("-" for none), without the pod_uid and container labels; pids are
// left out (they are the host's).
func (st *state) driverLines(ts *testscript.TestScript, ctx context.Context) []string {
	body, err := st.agent(ts).Metrics(ctx)
	ts.Check(err)
	names := map[string]string{}
	for name, p := range st.pods {
		names[p.UID] = name
	}
	var out []string
	for _, line := range strings.Split(body, "\n") {
		m := driverMetric.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pod, labels := "-", []string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			switch l[1] {
			case "pod_uid":
				if l[2] != "" {
					pod = names[l[2]]
				}
			case "container", "pid":
			default:
				labels = append(labels, l[1]+"="+l[2])
			}
		}
		out = append(out, strings.Join(append([]string{pod, strings.TrimPrefix(m[1], "hami_")}, labels...), " ")+" "+m[3])
	}
	sort.Strings(out)
	return out
}

func (st *state) monitorOver(ts *testscript.TestScript, ctx context.Context, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: %s", monitorUsage)
	}
	pod := st.pod(ts, args[0])
	fs := flag.NewFlagSet("monitor over", flag.ContinueOnError)
	holderName := fs.String("holder", "", "")
	within := fs.Int("within", 2, "")
	parseFlags(ts, monitorUsage, fs, args[1:], 0)
	want := regexp.MustCompile(`^` + metricname.DriverMemoryOverLimit + `\{[^}]*pod_uid="` + regexp.QuoteMeta(pod.UID) + `"[^}]*\} (\S+)$`)
	over := func() (judged, isOver bool) {
		body, err := st.agent(ts).Metrics(ctx)
		ts.Check(err)
		for _, l := range strings.Split(body, "\n") {
			if m := want.FindStringSubmatch(l); m != nil {
				judged = true
				if v, _ := strconv.ParseFloat(m[1], 64); v == 1 {
					isOver = true
				}
			}
		}
		return judged, isOver
	}
	if neg {
		// Judged and within its limit, by a pass at most PERIODS periods from now (a process just
		// released or killed leaves the driver's list by the next pass).
		deadline := time.Now().Add(time.Duration(*within) * st.agent(ts).Period)
		for {
			judged, isOver := over()
			if judged && !isOver {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("pod %s is not judged within its limit after %d periods (judged %v, over %v)\n%s\n%s", args[0], *within, judged, isOver,
					strings.Join(st.driverLines(ts, ctx), "\n"), st.agent(ts).LogTail())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	since := time.Now()
	if *holderName != "" {
		h := st.holders[*holderName]
		if h == nil {
			ts.Fatalf("monitor over: no holder %s", *holderName)
		}
		t, err := h.GrantedAt(ctx)
		ts.Check(err)
		since = t
	}
	bound := time.Duration(*within) * st.agent(ts).Period
	for {
		if _, isOver := over(); isOver {
			took := time.Since(since)
			if took > bound {
				ts.Fatalf("pod %s found over its limit %v after the allocation, want within %d periods (%v)", args[0], took.Round(time.Millisecond), *within, bound)
			}
			ts.Logf("pod %s over its limit by the driver's count, %v after the allocation (bound %v)", args[0], took.Round(time.Millisecond), bound)
			return
		}
		if time.Since(since) > bound {
			ts.Fatalf("pod %s not found over its limit within %d periods (%v)\n%s", args[0], *within, bound, st.agent(ts).LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
