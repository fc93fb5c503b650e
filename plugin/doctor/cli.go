package doctor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Connect builds the cluster access of a kubeconfig path ("": $KUBECONFIG, then ~/.kube/config);
// tests replace it.
type Connect func(kubeconfig string) (Cluster, error)

// APIConnect is the Connect of a real cluster: through its API server.
func APIConnect(kubeconfig string) (Cluster, error) { return NewAPICluster(kubeconfig) }

// ExitError carries the command's exit status: 1 a check failed, 2 the doctor could not run (bad
// flags, no cluster access).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// CLI is the doctor's command line, shared by limitbed-doctor (plugin/cmd/limitbed-doctor) and
// the harness's `limitbed doctor`.
type CLI struct {
	// Name is the command as the usage shows it: "limitbed-doctor".
	Name           string
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	Connect        Connect
	// NoTarget runs when neither --pod nor --node nor a flag that needs them is given; nil makes
	// that a usage error. The harness's CLI probes this machine's test tiers there.
	NoTarget func(ctx context.Context) error
	// NoTargetUsage is the usage line of NoTarget ("" when nil).
	NoTargetUsage string
}

// flags are the command line's values.
type flags struct {
	ns, pod, ctr, node, kubeconfig, pluginNS, gpuTool string
	asJSON                                            bool
	timeout                                           time.Duration
}

func (c *CLI) flagSet(f *flags) *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&f.ns, "namespace", "", "namespace of the pod to check (with --pod)")
	fs.StringVar(&f.pod, "pod", "", "pod to check: its resources, annotations, delivery, library, limits file, usage region and what sessions see")
	fs.StringVar(&f.ctr, "container", "", "container of --pod (default: the first)")
	fs.StringVar(&f.node, "node", "", "node to check: plugin registered, library installed, .limits files against live pods, the monitor")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&f.pluginNS, "plugin-namespace", DefaultPluginNamespace, "namespace of the chart's DaemonSet and ConfigMap")
	fs.StringVar(&f.gpuTool, "gpu-tool", "", "path of gpuinfo or nvidia-smi in the container (default: looked up in its PATH)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		if c.NoTargetUsage != "" {
			fmt.Fprintf(c.Stderr, "usage: %s                                   %s\n       ", c.Name, c.NoTargetUsage)
		} else {
			fmt.Fprint(c.Stderr, "usage: ")
		}
		fmt.Fprintf(c.Stderr, "%s --namespace N --pod P [--container C] [--json]   check a GPU pod\n", c.Name)
		fmt.Fprintf(c.Stderr, "       %s --node NODE [--json]              check a GPU node\n", c.Name)
		fmt.Fprintln(c.Stderr, "\nThe checks and what each verdict means: docs/operator-guide.md (Troubleshooting).")
		fs.PrintDefaults()
	}
	return fs
}

// Run walks the troubleshooting checklist of --pod or --node against a live cluster and prints
// the report; a failed check is an *ExitError with Code 1, a usage or access error one with Code 2.
// -h prints the usage and returns nil.
func (c *CLI) Run(ctx context.Context, args []string) error {
	var f flags
	fs := c.flagSet(&f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &ExitError{2, err}
	}
	if fs.NArg() > 0 {
		return &ExitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if err := f.check(c.NoTarget != nil); err != nil {
		return err
	}
	if f.pod == "" && f.node == "" {
		return c.NoTarget(ctx)
	}
	cl, err := c.Connect(f.kubeconfig)
	if err != nil {
		return &ExitError{2, err}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return c.report(ctx, &Doctor{Cluster: cl, PluginNamespace: f.pluginNS, GPUTool: f.gpuTool, Logger: c.Logger}, f)
}

// check refuses flags that do not go together; without --pod or --node only a NoTarget may run.
func (f *flags) check(noTarget bool) error {
	live := f.pod != "" || f.node != ""
	switch {
	case !live && (f.ns != "" || f.ctr != "" || f.asJSON):
		return &ExitError{2, fmt.Errorf("--namespace, --container and --json need --pod or --node")}
	case f.pod != "" && f.node != "":
		return &ExitError{2, fmt.Errorf("give --pod or --node, not both")}
	case f.pod != "" && f.ns == "":
		return &ExitError{2, fmt.Errorf("--pod needs --namespace")}
	case f.node != "" && (f.ctr != "" || f.gpuTool != ""):
		return &ExitError{2, fmt.Errorf("--container and --gpu-tool go with --pod")}
	case !live && !noTarget:
		return &ExitError{2, fmt.Errorf("give --namespace N --pod P, or --node NODE")}
	}
	return nil
}

func (c *CLI) report(ctx context.Context, d *Doctor, f flags) error {
	var rep *Report
	var err error
	if f.pod != "" {
		rep, err = d.Pod(ctx, f.ns, f.pod, f.ctr)
	} else {
		rep, err = d.Node(ctx, f.node)
	}
	if err != nil {
		return &ExitError{2, err}
	}
	if f.asJSON {
		err = rep.WriteJSON(c.Stdout)
	} else {
		err = rep.WriteText(c.Stdout)
	}
	if err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if rep.Failed() {
		return &ExitError{1, fmt.Errorf("%s: a check failed (see the fix under it)", rep.Target)}
	}
	return nil
}
