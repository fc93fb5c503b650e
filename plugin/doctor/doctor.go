// Package doctor walks the troubleshooting checklist of a GPU pod or node against a live cluster:
// the pod's resources, the scheduler's annotations, the limitDelivery that applies, the preload and
// the library inside the container, the limits file and the environment, the usage region, and
// what an exec session and a login session see. Each check is a function over Cluster, so the
// checklist runs against client-go's fake clientset and fake containers in tests.
//
// It is the operator's tool (limitbed-doctor, plugin/cmd/limitbed-doctor), run against production
// clusters, so it links no test framework and no test bed: it execs through the API server
// (plugin/podexec) behind the container interface (plugin/ctrexec), so that plugin/launch's `su -`
// method opens its login sessions as the harness's own tiers do; those packages are production
// code the harness imports, and need client-go and the standard library only (plugin/cmd's
// TestProductionBinariesLinkNoTestDoubles holds the binary to it).
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/launch"
)

// Verdict of one check.
type Verdict string

// Verdicts, best first.
const (
	OK   Verdict = "ok"
	Warn Verdict = "warn"
	Fail Verdict = "fail"
)

// Check is the outcome of one step of the checklist.
type Check struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
	Cause   string  `json:"cause,omitempty"`
	Fix     string  `json:"fix,omitempty"`
}

// Report is every check of one target, in checklist order.
type Report struct {
	Target string  `json:"target"`
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Verdict == Fail {
			return true
		}
	}
	return false
}

// Check returns the check called name.
func (r *Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func (r *Report) add(c Check) { r.Checks = append(r.Checks, c); r.OK = !r.Failed() }

// WriteText prints one line per check, with the cause and the fix under a failure or a warning.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "doctor %s\n", r.Target)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-4s %-12s %s\n", c.Verdict, c.Name, c.Detail)
		if c.Cause != "" {
			fmt.Fprintf(&b, "     %-12s cause: %s\n", "", c.Cause)
		}
		if c.Fix != "" {
			fmt.Fprintf(&b, "     %-12s fix:   %s\n", "", c.Fix)
		}
	}
	verdict := "ok"
	if r.Failed() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "%s: %s\n", r.Target, verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	r.OK = !r.Failed()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Cluster is what the checks need from the API server.
type Cluster interface {
	Kube() kubernetes.Interface
	// Container opens a container of a pod for exec through the API server; launch methods run in it.
	Container(ctx context.Context, namespace, pod, container string) (ctrexec.Container, error)
	// ProxyGet fetches path from a pod's port through the API server's pod proxy.
	ProxyGet(ctx context.Context, namespace, pod, port, path string) ([]byte, error)
}

// LoginFunc runs command in a login session of c (a fresh environment, as ssh gives).
type LoginFunc func(ctx context.Context, c ctrexec.Container, command string) (launch.Result, error)

// LaunchLogin runs command through plugin/launch's `su -` method.
func LaunchLogin(ctx context.Context, c ctrexec.Container, command string) (launch.Result, error) {
	m, err := launch.Lookup("su -")
	if err != nil {
		return launch.Result{}, err
	}
	return launch.Run(ctx, c, m, command)
}

// Doctor runs the checklists.
type Doctor struct {
	Cluster Cluster
	// PluginNamespace holds the chart's DaemonSet pods and ConfigMap.
	PluginNamespace string
	// GPUTool is the path of gpuinfo or nvidia-smi in the container; empty looks both up in PATH.
	GPUTool string
	// Login starts a login session; nil uses LaunchLogin.
	Login  LoginFunc
	Logger *slog.Logger
}

// DefaultPluginNamespace is where the chart is installed by default.
const DefaultPluginNamespace = "limitbed-system"

func (d *Doctor) login() LoginFunc {
	if d.Login != nil {
		return d.Login
	}
	return LaunchLogin
}

func (d *Doctor) logger() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func pass(name, detail string) Check { return Check{Name: name, Verdict: OK, Detail: detail} }

func warn(name, detail, cause, fix string) Check {
	return Check{Name: name, Verdict: Warn, Detail: detail, Cause: cause, Fix: fix}
}

func fail(name, detail, cause, fix string) Check {
	return Check{Name: name, Verdict: Fail, Detail: detail, Cause: cause, Fix: fix}
}
