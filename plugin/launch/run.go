package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitbed/limitbed/plugin/ctrexec"
)

// jobRoot holds one directory per launch inside the container.
const jobRoot = "/tmp/limitbed-launch"

// jobFiles are what the job script leaves in its directory; "rc" is written last.
var jobFiles = []string{"rc", "user", "env", "stdout", "stderr"}

// Result is what one launch observed.
type Result struct {
	Method   string
	Stdout   []byte            // the command's stdout
	Stderr   []byte            // the command's stderr (libvgpu.so and fakegpu log here)
	ExitCode int               // the command's exit code
	Env      map[string]string // the environment of the process the method started
	User     string            // the user it ran as
	// Probe is cudaprobe's one-line JSON report: the last stdout line holding a JSON object, or nil.
	Probe map[string]any
	// ProbeJSON is that line as is, for decoding into a typed report.
	ProbeJSON json.RawMessage
	// Launcher is the output of the exec that started the method (su, ssh, login messages).
	Launcher ctrexec.ExecResult
	Elapsed  time.Duration
}

// Run starts command (a shell command line, e.g. `cudaprobe --mib 4096`) in c through m and waits for
// it. Detached methods (cron) wait until the job has run, bounded by ctx: give cron at least 70 s.
// It returns an error wrapping ctrexec.ErrUnsupported when c cannot offer m.
func Run(ctx context.Context, c ctrexec.Container, m Method, command string) (Result, error) {
	if err := m.supported(ctx, c); err != nil {
		return Result{}, err
	}
	start := time.Now()
	dir, err := newJobDir()
	if err != nil {
		return Result{}, err
	}
	job := dir + "/run"
	fail := func(format string, args ...any) (Result, error) {
		// format may use %w: callers match context errors through it.
		return Result{}, fmt.Errorf("launch %q: "+format, append([]any{m.Name}, args...)...)
	}
	if err := writeJob(ctx, c, dir, jobScript(dir, command)); err != nil {
		return fail("%w", err)
	}
	defer func() {
		cleanup := context.WithoutCancel(ctx)
		if m.undo != nil {
			_, _ = c.Exec(cleanup, m.undo(job, dir), ctrexec.ExecOptions{})
		}
		_, _ = c.Exec(cleanup, []string{"rm", "-rf", dir}, ctrexec.ExecOptions{})
	}()

	launcher, err := c.Exec(ctx, m.argv(job, dir), ctrexec.ExecOptions{})
	if err != nil {
		return fail("start: %w", err)
	}
	if m.detached {
		if launcher.ExitCode != 0 {
			return fail("start exited %d: %s%s", launcher.ExitCode, launcher.Stdout, launcher.Stderr)
		}
		if err := waitJob(ctx, c, m, job, dir); err != nil {
			return fail("%w", err)
		}
	}
	files, err := readJob(ctx, c, dir)
	if err != nil {
		return fail("%w", err)
	}
	rc, ok := files["rc"]
	if !ok {
		return fail("the job did not complete; launcher exited %d\nstdout: %s\nstderr: %s",
			launcher.ExitCode, launcher.Stdout, launcher.Stderr)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(rc)))
	if err != nil {
		return fail("bad exit code %q", rc)
	}
	res := Result{
		Method:   m.Name,
		Stdout:   files["stdout"],
		Stderr:   files["stderr"],
		ExitCode: code,
		Env:      parseEnv(files["env"]),
		User:     strings.TrimSpace(string(files["user"])),
		Launcher: launcher,
		Elapsed:  time.Since(start),
	}
	res.ProbeJSON, res.Probe = parseProbe(res.Stdout)
	return res, nil
}

func newJobDir() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("job id: %w", err)
	}
	return jobRoot + "/" + hex.EncodeToString(b[:]), nil
}

// jobScript records the started process's environment and user, then runs command with its output
// in files. The command runs in a subshell so that its `exit` still lets the script record the code.
func jobScript(dir, command string) string {
	return fmt.Sprintf(`D=%s
: > "$D/started"
env -0 > "$D/env"
id -un > "$D/user"
(
%s
) > "$D/stdout" 2> "$D/stderr" < /dev/null
echo $? > "$D/rc.tmp"
mv "$D/rc.tmp" "$D/rc"
`, dir, command)
}

// writeJob creates the job directory (writable by the unprivileged user methods switch to) and script.
func writeJob(ctx context.Context, c ctrexec.Container, dir, script string) error {
	res, err := c.Exec(ctx, []string{"sh", "-c",
		`mkdir -p "$1" && chmod 0777 "$1" && cat > "$1/run" && chmod 0755 "$1/run"`, "write-job", dir},
		ctrexec.ExecOptions{Stdin: strings.NewReader(script)})
	if err != nil {
		return fmt.Errorf("write job: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("write job: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}

// pokeEvery is how often a detached job that has not started is poked (see Method.poke).
const pokeEvery = 10 * time.Second

// waitJob polls for the job's exit-code file, poking the method's scheduler while it waits.
func waitJob(ctx context.Context, c ctrexec.Container, m Method, job, dir string) error {
	lastPoke := time.Now()
	for {
		if m.poke != nil && time.Since(lastPoke) >= pokeEvery {
			lastPoke = time.Now()
			if _, err := c.Exec(ctx, m.poke(job, dir), ctrexec.ExecOptions{}); err != nil {
				return fmt.Errorf("wait for the job: poke: %w", err)
			}
		}
		res, err := c.Exec(ctx, []string{"test", "-e", dir + "/rc"}, ctrexec.ExecOptions{})
		if err != nil {
			return fmt.Errorf("wait for the job: %w", err)
		}
		if res.ExitCode == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the job: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readJob fetches the job's files in one exec, each as "name size\n" then its bytes.
func readJob(ctx context.Context, c ctrexec.Container, dir string) (map[string][]byte, error) {
	script := `cd "$1" && shift && for f; do [ -f "$f" ] && printf '%s %s\n' "$f" "$(wc -c < "$f")" && cat "$f"; done; exit 0`
	res, err := c.Exec(ctx, append([]string{"sh", "-c", script, "read-job", dir}, jobFiles...), ctrexec.ExecOptions{})
	if err != nil {
		return nil, fmt.Errorf("read job results: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("read job results: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return parseJobFiles(res.Stdout)
}

func parseJobFiles(out []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	for len(out) > 0 {
		nl := bytes.IndexByte(out, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("read job results: truncated header %q", out)
		}
		name, sizeStr, ok := strings.Cut(string(out[:nl]), " ")
		size, err := strconv.Atoi(strings.TrimSpace(sizeStr))
		if !ok || err != nil || size < 0 || size > len(out)-nl-1 {
			return nil, fmt.Errorf("read job results: bad header %q", out[:nl])
		}
		files[name] = out[nl+1 : nl+1+size]
		out = out[nl+1+size:]
	}
	return files, nil
}

// parseEnv parses `env -0` output.
func parseEnv(b []byte) map[string]string {
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// parseProbe returns the last stdout line that is a JSON object.
func parseProbe(stdout []byte) (json.RawMessage, map[string]any) {
	lines := bytes.Split(bytes.TrimSpace(stdout), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var obj map[string]any
		if json.Unmarshal(line, &obj) == nil {
			return json.RawMessage(bytes.Clone(line)), obj
		}
	}
	return nil, nil
}
