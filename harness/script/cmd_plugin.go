package script

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/plugin/allocate"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const pluginUsage = "plugin start [--profile=current|hami-v2.10] [--delivery=file|env] [--allow-pod-env] " +
	"[--core=current|hami-v2.10|PATH] [--gpu=PROFILE] [--mig] [--fail-publish=STEP] [--http-api] | plugin stop"

// cmdPlugin starts the device plugin on the script's node (laying out HOOK_PATH with the chosen
// libvgpu.so), or stops it. Starting again after a stop keeps HOOK_PATH and the running
// containers, as a plugin rollout does.
func cmdPlugin(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: %s", pluginUsage)
	}
	st := getState(ts)
	switch args[0] {
	case "stop":
		if len(args) != 1 {
			ts.Fatalf("usage: %s", pluginUsage)
		}
		if st.node == nil {
			ts.Fatalf("plugin stop: no plugin running")
		}
		st.node.Close()
		st.node = nil
		return
	case "start":
	default:
		ts.Fatalf("usage: %s", pluginUsage)
	}
	fs := flag.NewFlagSet("plugin start", flag.ContinueOnError)
	profile := fs.String("profile", "current", "")
	deliv := fs.String("delivery", "", "")
	allow := fs.Bool("allow-pod-env", false, "")
	core := fs.String("core", "current", "")
	gpuProfile := fs.String("gpu", "a16-16q", "")
	mig := fs.Bool("mig", false, "")
	failPublish := fs.String("fail-publish", "", "")
	httpAPI := fs.Bool("http-api", false, "")
	parseFlags(ts, pluginUsage, fs, args[1:], 0)
	if st.node != nil {
		ts.Fatalf("plugin start: a plugin is running; plugin stop first")
	}
	if _, err := allocate.ParseProfile(*profile); err != nil {
		ts.Fatalf("%v\nusage: %s", err, pluginUsage)
	}
	if *deliv != "" && !v1.LimitDelivery(*deliv).Valid() {
		ts.Fatalf("--delivery=%q: want file or env\nusage: %s", *deliv, pluginUsage)
	}
	cfg := node.Config{
		Dir: st.dir, Artifacts: st.artifacts, Plugin: allocate.Profile(*profile), Delivery: v1.LimitDelivery(*deliv),
		AllowPodEnv: *allow, Core: *core, MIG: *mig, Logger: st.logger, HTTPAPI: *httpAPI,
		GPUProfile: filepath.Join(st.root, "fakegpu", "profiles", *gpuProfile+".profile"),
	}
	if *core != "current" && *core != "hami-v2.10" {
		cfg.Core = ts.MkAbs(*core)
	}
	if *failPublish != "" {
		f, err := newFaultFS(*failPublish)
		if err != nil {
			ts.Fatalf("%v\nusage: %s", err, pluginUsage)
		}
		cfg.FS = f
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	ts.Check(err)
	st.node = n
	ts.Logf("plugin %s, core %s, delivery %q, HOOK_PATH %s", *profile, *core, *deliv, n.HookPath)
}

const podUsage = "pod allocate NAME [--gpumem=MIB] [--cores=PCT] [--annotation=K=V]... [--env=K=V]... | " +
	"pod delete NAME | pod annotation NAME KEY"

// cmdPod allocates a pod through the kubelet API (printing the response's environment and mounts
// to stdout), deletes it from the API server, or prints one of its annotations. With !, allocate
// must fail; the error goes to stderr.
func cmdPod(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: %s", podUsage)
	}
	st := getState(ts)
	if st.node == nil {
		ts.Fatalf("pod %s: no plugin running (plugin start first)", args[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch args[0] {
	case "allocate":
		fs := flag.NewFlagSet("pod allocate", flag.ContinueOnError)
		mem := fs.Int("gpumem", 3000, "")
		cores := fs.Int("cores", 0, "")
		ann, env := multi{}, multi{}
		fs.Var(ann, "annotation", "")
		fs.Var(env, "env", "")
		name := parseFlags(ts, podUsage, fs, reorder(args[1:]), 1)[0]
		if _, ok := st.pods[name]; ok {
			ts.Fatalf("pod %s exists (pod delete it first)", name)
		}
		p, err := st.node.Allocate(ctx, node.PodSpec{Name: name, GPUMem: int32(*mem), Cores: int32(*cores), Annotations: ann, Env: env})
		if neg {
			if err == nil {
				ts.Fatalf("pod allocate %s: unexpected success", name)
			}
			fmt.Fprintln(ts.Stderr(), err)
			return
		}
		ts.Check(err)
		st.pods[name] = p
		fmt.Fprint(ts.Stdout(), describe(p))
	case "delete":
		if neg || len(args) != 2 {
			ts.Fatalf("usage: %s", podUsage)
		}
		ts.Check(st.node.DeletePod(ctx, args[1]))
		delete(st.pods, args[1])
	case "annotation":
		if neg || len(args) != 3 {
			ts.Fatalf("usage: %s", podUsage)
		}
		v, err := st.node.PodAnnotation(ctx, args[1], args[2])
		ts.Check(err)
		fmt.Fprintln(ts.Stdout(), v)
	default:
		ts.Fatalf("usage: %s", podUsage)
	}
}

// describe prints a response: "env K=V" lines (sorted) and "mount CONTAINER <- HOST (ro|rw)".
func describe(p *node.Pod) string {
	var b strings.Builder
	keys := make([]string, 0, len(p.Resp.Envs))
	for k := range p.Resp.Envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "env %s=%s\n", k, p.Resp.Envs[k])
	}
	mounts := slices.Clone(p.Resp.Mounts)
	slices.SortFunc(mounts, func(a, b2 *pluginapi.Mount) int { return strings.Compare(a.ContainerPath, b2.ContainerPath) })
	for _, m := range mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(&b, "mount %s <- %s (%s)\n", m.ContainerPath, m.HostPath, mode)
	}
	return b.String()
}

// pod returns the named pod or fails.
func (st *state) pod(ts *testscript.TestScript, name string) *node.Pod {
	p, ok := st.pods[name]
	if !ok {
		ts.Fatalf("no allocated pod %q (pod allocate %s first; an allocation that failed has no pod)", name, name)
	}
	return p
}
