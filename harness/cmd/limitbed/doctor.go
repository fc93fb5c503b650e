package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/limitbed/limitbed/harness/doctor"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/tiers"
)

// doctorCluster builds the cluster access of the live modes; tests replace it.
type doctorCluster func(kubeconfig string) (doctor.Cluster, error)

func apiCluster(kubeconfig string) (doctor.Cluster, error) { return doctor.NewAPICluster(kubeconfig) }

// runDoctor with no flags probes every tier of this machine and prints one line each (exit 0: a
// machine without a GPU is not an error). With --namespace/--pod or --node it walks the
// troubleshooting checklist against a live cluster and exits 1 when a check failed.
func runDoctor(ctx context.Context, env *cliEnv, args []string) error {
	return doctorMain(ctx, env, args, apiCluster)
}

func doctorMain(ctx context.Context, env *cliEnv, args []string, connect doctorCluster) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	ns := fs.String("namespace", "", "namespace of the pod to check (with --pod)")
	pod := fs.String("pod", "", "pod to check: its resources, annotations, delivery, library, limits file, usage region and what sessions see")
	ctr := fs.String("container", "", "container of --pod (default: the first)")
	node := fs.String("node", "", "node to check: plugin registered, library installed, .limits files against live pods, the monitor")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	pluginNS := fs.String("plugin-namespace", doctor.DefaultPluginNamespace, "namespace of the chart's DaemonSet and ConfigMap")
	gpuTool := fs.String("gpu-tool", "", "path of gpuinfo or nvidia-smi in the container (default: looked up in its PATH)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: limitbed doctor                                   which test tiers this machine can run")
		fmt.Fprintln(env.stderr, "       limitbed doctor --namespace N --pod P [--container C] [--json]   check a GPU pod")
		fmt.Fprintln(env.stderr, "       limitbed doctor --node NODE [--json]              check a GPU node")
		fmt.Fprintln(env.stderr, "\nThe checks and what each verdict means: docs/operator-guide.md (Troubleshooting).")
		fs.PrintDefaults()
	}
	if help, err := parseArgs(fs, args); help || err != nil {
		return err
	}
	live := *pod != "" || *node != ""
	switch {
	case !live && (*ns != "" || *ctr != "" || *asJSON):
		return &exitError{2, fmt.Errorf("--namespace, --container and --json need --pod or --node")}
	case *pod != "" && *node != "":
		return &exitError{2, fmt.Errorf("give --pod or --node, not both")}
	case *pod != "" && *ns == "":
		return &exitError{2, fmt.Errorf("--pod needs --namespace")}
	case *node != "" && (*ctr != "" || *gpuTool != ""):
		return &exitError{2, fmt.Errorf("--container and --gpu-tool go with --pod")}
	case !live:
		return probeTiers(ctx, env)
	}
	cl, err := connect(*kubeconfig)
	if err != nil {
		return &exitError{2, err}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	d := &doctor.Doctor{Cluster: cl, PluginNamespace: *pluginNS, GPUTool: *gpuTool, Logger: env.logger}
	var rep *doctor.Report
	if *pod != "" {
		rep, err = d.Pod(ctx, *ns, *pod, *ctr)
	} else {
		rep, err = d.Node(ctx, *node)
	}
	if err != nil {
		return &exitError{2, err}
	}
	if *asJSON {
		err = rep.WriteJSON(env.stdout)
	} else {
		err = rep.WriteText(env.stdout)
	}
	if err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if rep.Failed() {
		return &exitError{1, fmt.Errorf("%s: a check failed (see the fix under it)", rep.Target)}
	}
	return nil
}

// probeTiers prints one line per test tier: yes with what was found, or no with the reason and the fix.
func probeTiers(ctx context.Context, env *cliEnv) error {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return &exitError{2, err}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, r := range tiers.Probe(ctx, env.logger, root) {
		if r.OK {
			fmt.Fprintf(env.stdout, "%-8s yes: %s\n", r.Tier, r.Detail)
			continue
		}
		fmt.Fprintf(env.stdout, "%-8s no: %s\n%-8s   fix: %s\n", r.Tier, r.Detail, "", r.Fix)
	}
	return nil
}
