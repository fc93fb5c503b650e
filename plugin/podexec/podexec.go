// Package podexec runs a command in a pod's container through the API server, as kubectl exec
// does. It needs client-go only, so the doctor (limitbed-doctor, plugin/doctor) and the kind tier
// share it without the doctor linking the kind and Helm libraries.
package podexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/limitbed/limitbed/plugin/ctrexec"
)

// Target is one container of a pod.
type Target struct {
	Kube                      kubernetes.Interface
	REST                      *rest.Config
	Namespace, Pod, Container string
}

func (t Target) String() string { return t.Namespace + "/" + t.Pod + "/" + t.Container }

// Exec runs cmd with the container's environment plus opts.Env (through env(1)), as opts.User
// through runuser(1) when set (the API has no user field). A non-zero exit is a result, not an error.
func (t Target) Exec(ctx context.Context, cmd []string, opts ctrexec.ExecOptions) (ctrexec.ExecResult, error) {
	argv := cmd
	if len(opts.Env) > 0 {
		keys := make([]string, 0, len(opts.Env))
		for k := range opts.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pre := []string{"env"}
		for _, k := range keys {
			pre = append(pre, k+"="+opts.Env[k])
		}
		argv = append(pre, argv...)
	}
	if opts.User != "" {
		argv = append([]string{"runuser", "-u", opts.User, "--"}, argv...)
	}
	req := t.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: t.Container, Command: argv, Stdin: opts.Stdin != nil, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(t.REST, "POST", req.URL())
	if err != nil {
		return ctrexec.ExecResult{}, fmt.Errorf("exec in %s: %w", t, err)
	}
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: opts.Stdin, Stdout: &out, Stderr: &errb})
	res := ctrexec.ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee utilexec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitStatus()
	default:
		return res, fmt.Errorf("exec %v in %s: %w", cmd, t, err)
	}
	return res, nil
}
