package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/limitbed/limitbed/harness/sandbox"
	v1 "github.com/limitbed/limitbed/plugin/api/config/v1"
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

// gpuTool returns the command line that prints the GPUs' memory totals: tool when given, else
// gpuinfo or nvidia-smi from the container's PATH.
func gpuTool(ctx context.Context, c sandbox.Container, tool string) (string, error) {
	p := tool
	if p == "" {
		res, err := c.Exec(ctx, []string{"sh", "-c", "command -v gpuinfo || command -v nvidia-smi"}, sandbox.ExecOptions{})
		if err != nil {
			return "", fmt.Errorf("exec in %s: %w", c, err)
		}
		p = strings.TrimSpace(string(res.Stdout))
	}
	switch {
	case strings.HasSuffix(p, "gpuinfo"):
		return p + " --json", nil
	case strings.HasSuffix(p, "nvidia-smi"):
		return p + " --query-gpu=memory.total --format=csv,noheader,nounits", nil
	}
	if tool != "" {
		return "", fmt.Errorf("--gpu-tool %q is neither gpuinfo nor nvidia-smi", tool)
	}
	return "", errNoTool
}

var errNoTool = errors.New("neither gpuinfo nor nvidia-smi is in the container's PATH (or give --gpu-tool)")

func (r *podRun) compareView(name, session string, out []byte, code int) Check {
	if code != 0 {
		return fail(name, fmt.Sprintf("the GPU tool exited %d in the %s session: %s", code, session, strings.TrimSpace(string(out))), "", "")
	}
	totals, err := parseTotals(out)
	if err != nil {
		return fail(name, fmt.Sprintf("%s session: %v", session, err), "", "")
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
				cause = "a login session has no environment: the limit reaches it only through " + containerLimitsFile
				if r.mode == v1.LimitDeliveryEnv {
					cause += ", and the pod runs in env mode"
					fix = "switch the pod to file mode (see delivery) and recreate it"
				} else {
					fix = "check limits-file and library above: an old library reads the file too late"
				}
			}
			return fail(name, fmt.Sprintf("the %s session sees %d MiB on device %d, the limit is %d MiB", session, totals[i], i, dv.UsedMem), cause, fix)
		}
	}
	return pass(name, fmt.Sprintf("the %s session sees %s, the limit", session, strings.Join(seen, ", ")))
}

// viewTool is the start both views share: the container is usable and has a tool that prints
// what a process sees; !ok with the check to report otherwise.
func (r *podRun) viewTool(ctx context.Context, name string) (string, Check, bool) {
	if c, skip := r.skipped(name); skip {
		return "", c, false
	}
	if err := r.open(ctx); err != nil {
		return "", fail(name, err.Error(), "", ""), false
	}
	cmd, err := gpuTool(ctx, r.c, r.d.GPUTool)
	if err != nil {
		return "", warn(name, err.Error(), "", "add gpuinfo or nvidia-smi to the image to compare what processes see"), false
	}
	return cmd, Check{}, true
}

// checkExecView: what a process started through the runtime (kubectl exec) sees.
func (r *podRun) checkExecView(ctx context.Context) Check {
	const name = "exec-view"
	cmd, c, ok := r.viewTool(ctx, name)
	if !ok {
		return c
	}
	res, err := r.c.Exec(ctx, []string{"sh", "-c", cmd}, sandbox.ExecOptions{})
	if err != nil {
		return fail(name, err.Error(), "", "")
	}
	return r.compareView(name, "exec", res.Stdout, res.ExitCode)
}

// checkLoginView: what a process started from a login session (su -, as ssh gives) sees.
func (r *podRun) checkLoginView(ctx context.Context) Check {
	const name = "login-view"
	cmd, c, ok := r.viewTool(ctx, name)
	if !ok {
		return c
	}
	res, err := r.d.login()(ctx, r.c, cmd)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return warn(name, "no login session: "+err.Error(), "", "install su (and a user "+sandbox.TenantUser+") in the image to check login sessions")
	}
	if err != nil {
		return warn(name, "no login session: "+err.Error(), "", "")
	}
	return r.compareView(name, "login", res.Stdout, res.ExitCode)
}
