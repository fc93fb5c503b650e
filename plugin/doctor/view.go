package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
	"github.com/limitbed/limitbed/plugin/ctrexec"
	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/nvsmi"
)

// parseTotals reads the memory total of every GPU, in MiB, from `gpuinfo --json` (one JSON object
// with devices[].memory_total_mib) or from nvidia-smi's memory.total query (plugin/nvsmi).
func parseTotals(out []byte) ([]uint64, error) {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return nil, fmt.Errorf("the GPU tool printed no device")
	}
	if !strings.HasPrefix(s, "{") {
		return nvsmi.ParseTotals(out)
	}
	var v struct {
		Devices []struct {
			Total *uint64 `json:"memory_total_mib"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("gpuinfo --json output does not parse: %w", err)
	}
	totals := make([]uint64, 0, len(v.Devices))
	for i, d := range v.Devices {
		if d.Total == nil {
			return nil, fmt.Errorf("gpuinfo --json: device %d has no memory_total_mib", i)
		}
		totals = append(totals, *d.Total)
	}
	return totals, nil
}

// gpuTools returns the command lines that print the GPUs' memory totals: tool's when given, else
// one for each of gpuinfo and nvidia-smi the container has in its PATH (both, when both are
// there: what each shows is checked).
func gpuTools(ctx context.Context, c ctrexec.Container, tool string) ([]string, error) {
	paths := []string{tool}
	if tool == "" {
		res, err := c.Exec(ctx, []string{"sh", "-c", "for t in gpuinfo nvidia-smi; do command -v $t; done; true"}, ctrexec.ExecOptions{})
		if err != nil {
			return nil, fmt.Errorf("exec in %s: %w", c, err)
		}
		paths = strings.Fields(string(res.Stdout))
	}
	var cmds []string
	for _, p := range paths {
		switch {
		case strings.HasSuffix(p, "gpuinfo"):
			cmds = append(cmds, p+" --json")
		case strings.HasSuffix(p, "nvidia-smi"):
			cmds = append(cmds, nvsmi.TotalsCommand(p))
		case tool != "":
			return nil, fmt.Errorf("--gpu-tool %q is neither gpuinfo nor nvidia-smi", tool)
		}
	}
	if len(cmds) == 0 {
		return nil, errNoTool
	}
	return cmds, nil
}

var errNoTool = errors.New("neither gpuinfo nor nvidia-smi is in the container's PATH (or give --gpu-tool)")

// toolName is the tool a command line runs, for the report.
func toolName(cmd string) string {
	bin, _, _ := strings.Cut(cmd, " ")
	return path.Base(bin)
}

func (r *podRun) compareView(name, session, tool string, out []byte, code int) Check {
	if code != 0 {
		return fail(name, fmt.Sprintf("%s exited %d in the %s session: %s", tool, code, session, strings.TrimSpace(string(out))), "", "")
	}
	totals, err := parseTotals(out)
	if err != nil {
		return fail(name, fmt.Sprintf("%s session: %s: %v", session, tool, err), "", "")
	}
	var seen []string
	for i, dv := range r.devs {
		if i >= len(totals) {
			return fail(name, fmt.Sprintf("the %s session sees %d devices, the pod has %d", session, len(totals), len(r.devs)), "", "")
		}
		seen = append(seen, fmt.Sprintf("%d MiB", totals[i]))
		if totals[i] != uint64(dv.UsedMem) {
			cause := "the library is not loaded in this session, or it did not get the limit"
			fix := "see the checks above"
			if session == "login" {
				cause = "a login session has no environment: the limit reaches it only through " + limitsfile.ContainerMountPath
				if r.mode == v1.LimitDeliveryEnv {
					cause += ", and the pod runs in env mode"
					fix = "switch the pod to file mode (see delivery) and recreate it"
				} else {
					fix = "check limits-file and library above: an old library reads the file too late"
				}
			}
			return fail(name, fmt.Sprintf("the %s session sees %d MiB on device %d (%s), the limit is %d MiB", session, totals[i], i, tool, dv.UsedMem), cause, fix)
		}
	}
	return pass(name, fmt.Sprintf("the %s session sees %s (%s), the limit", session, strings.Join(seen, ", "), tool))
}

// compareViews runs every tool's command through run and checks each; the first failure wins.
func (r *podRun) compareViews(name, session string, cmds []string, run func(cmd string) ([]byte, int, error)) Check {
	var seen []string
	for _, cmd := range cmds {
		out, code, err := run(cmd)
		if err != nil {
			return fail(name, err.Error(), "", "")
		}
		c := r.compareView(name, session, toolName(cmd), out, code)
		if c.Verdict != OK {
			return c
		}
		seen = append(seen, c.Detail)
	}
	return pass(name, strings.Join(seen, "; "))
}

// viewTools is the start both views share: the container is usable and has a tool that prints
// what a process sees; !ok with the check to report otherwise.
func (r *podRun) viewTools(ctx context.Context, name string) ([]string, Check, bool) {
	if c, skip := r.skipped(name); skip {
		return nil, c, false
	}
	if err := r.open(ctx); err != nil {
		return nil, fail(name, err.Error(), "", ""), false
	}
	cmds, err := gpuTools(ctx, r.c, r.d.GPUTool)
	if err != nil {
		return nil, warn(name, err.Error(), "", "add gpuinfo or nvidia-smi to the image to compare what processes see"), false
	}
	return cmds, Check{}, true
}

// checkExecView: what a process started through the runtime (kubectl exec) sees.
func (r *podRun) checkExecView(ctx context.Context) Check {
	const name = "exec-view"
	cmds, c, ok := r.viewTools(ctx, name)
	if !ok {
		return c
	}
	return r.compareViews(name, "exec", cmds, func(cmd string) ([]byte, int, error) {
		res, err := r.c.Exec(ctx, []string{"sh", "-c", cmd}, ctrexec.ExecOptions{})
		return res.Stdout, res.ExitCode, err
	})
}

// checkLoginView: what a process started from a login session (su -, as ssh gives) sees.
func (r *podRun) checkLoginView(ctx context.Context) Check {
	const name = "login-view"
	cmds, c, ok := r.viewTools(ctx, name)
	if !ok {
		return c
	}
	var noLogin *Check
	check := r.compareViews(name, "login", cmds, func(cmd string) ([]byte, int, error) {
		res, err := r.d.login()(ctx, r.c, cmd)
		if errors.Is(err, ctrexec.ErrUnsupported) {
			w := warn(name, "no login session: "+err.Error(), "", "install su (and a user "+ctrexec.TenantUser+") in the image to check login sessions")
			noLogin = &w
		} else if err != nil {
			w := warn(name, "no login session: "+err.Error(), "", "")
			noLogin = &w
		}
		return res.Stdout, res.ExitCode, err
	})
	if noLogin != nil {
		return *noLogin
	}
	return check
}
