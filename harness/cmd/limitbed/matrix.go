package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/limitbed/limitbed/harness/matrix"
	"github.com/limitbed/limitbed/harness/matrix/node"
	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/harness/sandbox/docker"
	"github.com/limitbed/limitbed/plugin/launch"
)

// matrixFlags are `limitbed matrix`'s flags, defaults filled in from the repository root.
type matrixFlags struct {
	root, build, backend, out, expected, profile         string
	coreOld, pluginOld, pluginOldArgs, coreLink, methods string
	parallel                                             int
}

func runMatrix(ctx context.Context, env *cliEnv, args []string) error {
	f, err := parseMatrixFlags(env, args)
	if err != nil {
		return err
	}
	r, err := f.runner(ctx, env)
	if err != nil {
		return &exitError{2, err}
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	return writeMatrix(env, f, rep)
}

// parseMatrixFlags reads the flags (usage errors exit 2) and fills in the defaults.
func parseMatrixFlags(env *cliEnv, args []string) (*matrixFlags, error) {
	var f matrixFlags
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.StringVar(&f.root, "root", "", "repository root (default: found from the working directory)")
	fs.StringVar(&f.build, "build", "", "C build directory holding lib/ and bin/ (default: ROOT/build)")
	fs.StringVar(&f.backend, "backend", "", "docker (default: $LIMITBED_BACKEND, else docker; the host backend is not offered)")
	fs.StringVar(&f.out, "out", "", "directory for matrix.md and matrix.json (default: ROOT)")
	fs.StringVar(&f.expected, "expected", "", "expectations (default: ROOT/testdata/matrix/expected.json)")
	fs.StringVar(&f.profile, "gpu-profile", "", "fakegpu profile (default: ROOT/fakegpu/profiles/a16-16q.profile)")
	fs.StringVar(&f.coreOld, "core-old", "", "libvgpu.so of a real old release, replacing the hami-v2.10 core column")
	fs.StringVar(&f.pluginOld, "plugin-old", "", "device plugin binary of a real old release, replacing the hami-v2.10 plugin column "+
		"(run as root in a mount namespace laid out as its DaemonSet's, against a fake kubelet and a fake API server; see docs/matrix.md)")
	fs.StringVar(&f.pluginOldArgs, "plugin-old-args", "", "arguments of the --plugin-old binary, split at white space; "+
		"placeholders such as {kubeconfig}, {socketdir}, {node}, {hookpath} are expanded (docs/matrix.md lists them)")
	fs.StringVar(&f.coreLink, "core-link", node.LinkAsNeeded, "as-needed: every core as built; no-as-needed: every core as if linked "+
		"with -Wl,--no-as-needed (the driver double "+node.DriverDouble+" preloaded after it: every process loads libcuda.so.1 "+
		"and libnvidia-ml.so.1 at start)")
	fs.StringVar(&f.methods, "methods", "", "comma-separated launch methods (default: all)")
	fs.IntVar(&f.parallel, "parallel", 0, "containers at once (default: all 8)")
	if err := fs.Parse(args); err != nil {
		return nil, &exitError{2, err}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{2, fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return &f, nil
}

// runner checks the flags' values and sets up the run: every error here is a usage error.
func (f *matrixFlags) runner(ctx context.Context, env *cliEnv) (*matrix.Runner, error) {
	if err := node.CheckLink(f.coreLink); err != nil {
		return nil, fmt.Errorf("--core-link: %w", err)
	}
	old, err := externalPlugin(f.pluginOld, f.pluginOldArgs)
	if err != nil {
		return nil, err
	}
	if err := f.defaults(); err != nil {
		return nil, err
	}
	if f.coreOld != "" {
		if _, err := os.Stat(f.coreOld); err != nil {
			return nil, fmt.Errorf("--core-old: %w", err)
		}
	}
	exp, err := matrix.LoadExpected(f.expected)
	if err != nil {
		return nil, err
	}
	ms, err := pickMethods(f.methods)
	if err != nil {
		return nil, err
	}
	b, err := matrixBackend(ctx, env, f.backend, ms)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(env.stderr, "matrix: backend %s, %d combinations × %d launch methods (cron waits for the next minute)\n",
		b.Name(), len(matrix.Combos()), len(ms))
	if f.coreLink == node.LinkNoAsNeeded {
		fmt.Fprintf(env.stderr, "matrix: every core as if linked with -Wl,--no-as-needed (%s preloaded after it)\n", node.DriverDouble)
	}
	if old != nil {
		fmt.Fprintf(env.stderr, "matrix: hami-v2.10 plugin column: %s (its output is quoted in the cells when it fails to start)\n", old)
	}
	return &matrix.Runner{
		Backend: b, Artifacts: node.Artifacts{Lib: filepath.Join(f.build, "lib"), Bin: filepath.Join(f.build, "bin")},
		GPUProfile: f.profile, Expected: exp, CoreOld: f.coreOld, CoreLink: f.coreLink, PluginOld: old, Methods: ms, Parallel: f.parallel,
		// CI's workload image has Debian's nvidia-smi, so there a cell without it is a mismatch.
		RequireNvidiaSMI: os.Getenv("CI") == "true",
		Logger:           env.logger, Progress: env.stderr,
	}, nil
}

// defaults fills in the root (found from the working directory) and the paths under it.
func (f *matrixFlags) defaults() error {
	if f.root == "" {
		r, err := sandbox.RepoRoot()
		if err != nil {
			return err
		}
		f.root = r
	}
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&f.build, filepath.Join(f.root, "build"))
	def(&f.out, f.root)
	def(&f.expected, filepath.Join(f.root, "testdata", "matrix", "expected.json"))
	def(&f.profile, filepath.Join(f.root, "fakegpu", "profiles", "a16-16q.profile"))
	return nil
}

// writeMatrix writes matrix.md and matrix.json, prints the table, and exits 1 on a mismatch.
func writeMatrix(env *cliEnv, f *matrixFlags, rep matrix.Report) error {
	md := matrix.Markdown(rep)
	js, err := matrix.JSON(rep)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(f.out, "matrix.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("write matrix.md: %w", err)
	}
	if err := os.WriteFile(filepath.Join(f.out, "matrix.json"), js, 0o644); err != nil {
		return fmt.Errorf("write matrix.json: %w", err)
	}
	fmt.Fprintln(env.stdout, md)
	if !rep.OK() {
		return &exitError{1, fmt.Errorf("%d of %d cells differ from %s, %d skipped", rep.Mismatch, len(rep.Results), f.expected, rep.Skipped)}
	}
	return nil
}

// externalPlugin checks --plugin-old and --plugin-old-args; nil when no binary is given.
func externalPlugin(path, args string) (*node.ExternalPlugin, error) {
	if path == "" {
		if args != "" {
			return nil, fmt.Errorf("--plugin-old-args needs --plugin-old")
		}
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("--plugin-old: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("--plugin-old: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("--plugin-old: %s is not an executable file", abs)
	}
	ext := &node.ExternalPlugin{Path: abs, Args: strings.Fields(args)}
	if err := node.CheckArgs(ext.Args); err != nil {
		return nil, fmt.Errorf("--plugin-old-args: %w", err)
	}
	return ext, nil
}

func pickMethods(list string) ([]launch.Method, error) {
	if list == "" {
		return launch.Methods(), nil
	}
	var out []launch.Method
	for _, name := range strings.Split(list, ",") {
		m, err := launch.Lookup(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// matrixBackend returns the Docker backend, set up with the workload image, or says what is missing
// and the command that fixes it. The host backend is not offered: it has no sshd or cron daemon
// (the ssh and cron cells) and does not model a container's own filesystem closely enough for
// the fake driver's mounts, so a matrix on it would report skipped or broken cells as results.
func matrixBackend(ctx context.Context, env *cliEnv, want string, ms []launch.Method) (sandbox.Backend, error) {
	if want == "" {
		want = os.Getenv(node.BackendEnv)
	}
	switch want {
	case "", "docker":
	case "host":
		return nil, fmt.Errorf("the host backend is not offered for the matrix (no sshd or cron daemon, no container filesystem of its own)\n%s", dockerFix())
	default:
		return nil, fmt.Errorf("backend %q: the matrix runs on docker", want)
	}
	if err := docker.New(env.logger).Available(ctx); err != nil {
		return nil, fmt.Errorf("the matrix needs a Docker engine: %w\n%s", err, dockerFix())
	}
	b, err := node.SelectBackend(ctx, env.logger, "docker")
	if err != nil {
		return nil, err
	}
	if err := matrix.Uncovered(b, ms); err != nil {
		return nil, err
	}
	return b, nil
}

// dockerFix is the command that gives this machine a backend for all 88 cells.
func dockerFix() string {
	if os.Geteuid() == 0 {
		return "fix: scripts/install-deps.sh installs Debian's docker.io and starts dockerd (make matrix runs it as root)"
	}
	return "fix: sudo scripts/install-deps.sh (installs Debian's docker.io and starts dockerd), then make matrix again; or sudo make matrix"
}
