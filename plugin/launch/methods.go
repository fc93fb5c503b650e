// Package launch starts a command in a container (plugin/ctrexec) the ways a user can: through the runtime
// (exec, like kubectl exec), from a shell (bash -c, &), and through real login machinery (su -, sudo,
// ssh, cron, login, runuser -l) that builds a fresh environment. Each launch reports the command's
// stdout, stderr, exit code, the environment and user the process saw, and cudaprobe's JSON line.
//
// Every method runs the same job script, so what differs between methods is only how the job is
// started: the script records `env` and `id -un` from inside the started process, then runs the
// command in a subshell with its output redirected to files, and writes the exit code last.
//
// The doctor runs its `su -` check through it and the test bed every method, so it is production
// code the harness imports.
package launch

import (
	"context"
	"fmt"
	"strings"

	"github.com/limitbed/limitbed/plugin/ctrexec"
)

// Method is one way of starting a process in a container.
type Method struct {
	// Name is how scenarios and reports refer to the method.
	Name string
	// KeepsEnv says whether the process sees the container's environment (the device plugin's
	// variables), per the design's "Process started by / Has the variables" table.
	KeepsEnv bool
	// User is the user the process runs as.
	User string
	// Doc says what the method runs, for reports and docs/harness-backends.md.
	Doc string

	needs []ctrexec.Feature // container features the method needs
	tools []string          // commands that must exist in the container
	// argv is the command exec'd (as root, with the container's environment) to start the job;
	// job is the job script's path and dir the job's directory, both inside the container.
	argv func(job, dir string) []string
	// detached methods return before the job ends; Run waits for the job's exit-code file.
	detached bool
	// undo, when set, is exec'd after a detached job ended (removing the cron entry).
	undo func(job, dir string) []string
	// poke, when set, is exec'd every pokeEvery while a detached job has not started yet.
	poke func(job, dir string) []string
}

const tenant = ctrexec.TenantUser

// methods is the table of launch methods. Everything that differs between methods is here.
var methods = []Method{
	{
		Name: "exec", KeepsEnv: true, User: "root",
		Doc:  "the runtime's exec (kubectl exec / docker exec): `sh JOB`",
		argv: func(job, _ string) []string { return []string{"sh", job} },
	},
	{
		Name: "bash -c", KeepsEnv: true, User: "root",
		Doc:   "a child of an exec'd shell: `bash -c 'sh JOB'`",
		tools: []string{"bash"},
		argv:  func(job, _ string) []string { return []string{"bash", "-c", "sh " + job} },
	},
	{
		Name: "&", KeepsEnv: true, User: "root",
		Doc:   "a background job of an exec'd shell, waited for: `bash -c 'sh JOB & wait $!'`",
		tools: []string{"bash"},
		argv:  func(job, _ string) []string { return []string{"bash", "-c", "sh " + job + " & wait $!"} },
	},
	{
		Name: "su", KeepsEnv: true, User: tenant,
		Doc:   "su keeping the environment: `su -m tenant -c 'sh JOB'`",
		tools: []string{"su"},
		argv:  func(job, _ string) []string { return []string{"su", "-m", tenant, "-c", "sh " + job} },
	},
	{
		Name: "su -", KeepsEnv: false, User: tenant,
		Doc:   "su with a login environment: `su - tenant -c 'sh JOB'`",
		tools: []string{"su"},
		argv:  func(job, _ string) []string { return []string{"su", "-", tenant, "-c", "sh " + job} },
	},
	{
		Name: "sudo", KeepsEnv: false, User: tenant,
		Doc:   "plain sudo; Debian's default env_reset drops the variables: `sudo -u tenant sh JOB`",
		tools: []string{"sudo"},
		argv:  func(job, _ string) []string { return []string{"sudo", "-u", tenant, "sh", job} },
	},
	{
		Name: "sudo -i", KeepsEnv: false, User: tenant,
		Doc:   "sudo with a login shell: `sudo -u tenant -i sh JOB`",
		tools: []string{"sudo"},
		argv:  func(job, _ string) []string { return []string{"sudo", "-u", tenant, "-i", "sh", job} },
	},
	{
		Name: "runuser -l", KeepsEnv: false, User: tenant,
		Doc:   "runuser with a login environment: `runuser -l tenant -c 'sh JOB'`",
		tools: []string{"runuser"},
		argv:  func(job, _ string) []string { return []string{"runuser", "-l", tenant, "-c", "sh " + job} },
	},
	{
		Name: "login", KeepsEnv: false, User: tenant,
		Doc: "login(1) on a pseudo-terminal: `script -qec 'login -f tenant' /dev/null`, the job typed " +
			"at the shell prompt",
		tools: []string{"script", "login"},
		argv: func(job, _ string) []string {
			return []string{"sh", "-c", fmt.Sprintf("printf 'sh %s; exit\\n' | script -qec 'login -f %s' /dev/null", job, tenant)}
		},
	},
	{
		Name: "ssh", KeepsEnv: false, User: tenant,
		Doc: "an ssh login by key over loopback from inside the container (the host may have no " +
			"route to it): `ssh tenant@127.0.0.1 sh JOB`",
		needs: []ctrexec.Feature{ctrexec.FeatureSSH},
		tools: []string{"ssh", "ssh-keygen"},
		argv:  sshArgv,
	},
	{
		Name: "cron", KeepsEnv: false, User: tenant,
		Doc: "the container's cron daemon: a line `* * * * * tenant ...` in /etc/cron.d, removed after " +
			"its first run; runs at the next minute boundary (up to 60 s)",
		needs:    []ctrexec.Feature{ctrexec.FeatureCron},
		tools:    []string{"cron"},
		argv:     cronInstallArgv,
		detached: true,
		undo:     cronRemoveArgv,
		poke:     cronPokeArgv,
	},
}

// Methods returns every launch method, in table order.
func Methods() []Method { return append([]Method(nil), methods...) }

// Lookup returns the method called name.
func Lookup(name string) (Method, error) {
	for _, m := range methods {
		if m.Name == name {
			return m, nil
		}
	}
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.Name
	}
	return Method{}, fmt.Errorf("unknown launch method %q (known: %s)", name, strings.Join(names, ", "))
}

// Needs lists the container features m needs beyond exec (sshd, a cron daemon).
func (m Method) Needs() []ctrexec.Feature { return append([]ctrexec.Feature(nil), m.needs...) }

// supported returns nil when c offers what m needs.
func (m Method) supported(ctx context.Context, c ctrexec.Container) error {
	for _, f := range m.needs {
		if !c.Supports(f) {
			return fmt.Errorf("%w: launch method %q needs %s, which the %s backend does not offer",
				ctrexec.ErrUnsupported, m.Name, f, c.Backend())
		}
	}
	if len(m.tools) == 0 {
		return nil
	}
	script := `for t; do command -v "$t" >/dev/null || echo "$t"; done`
	res, err := c.Exec(ctx, append([]string{"sh", "-c", script, "need"}, m.tools...), ctrexec.ExecOptions{})
	if err != nil {
		return fmt.Errorf("launch %q: look up %v: %w", m.Name, m.tools, err)
	}
	if missing := strings.Fields(string(res.Stdout)); len(missing) > 0 {
		return fmt.Errorf("%w: launch method %q needs %s, missing in this %s container",
			ctrexec.ErrUnsupported, m.Name, strings.Join(missing, ", "), c.Backend())
	}
	return nil
}

// sshArgv installs a per-container key for tenant (idempotent), then logs in over loopback,
// retrying while sshd is not yet listening (exit 255 before the job started).
func sshArgv(job, dir string) []string {
	script := `set -u
key=/root/.ssh/limitbed_ed25519
mkdir -p /root/.ssh && chmod 700 /root/.ssh
[ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -f "$key"
home=$(getent passwd "$1" | cut -d: -f6)
install -d -m 700 -o "$1" -g "$1" "$home/.ssh"
install -m 600 -o "$1" -g "$1" "$key.pub" "$home/.ssh/authorized_keys"
i=0
while :; do
	ssh -i "$key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
		-o LogLevel=ERROR -o ConnectTimeout=5 "$1@127.0.0.1" "sh $2"
	rc=$?
	[ "$rc" -ne 255 ] || [ -e "$3/started" ] || [ "$i" -ge 50 ] && exit "$rc"
	i=$((i + 1)); sleep 0.1
done`
	return []string{"sh", "-c", script, "ssh-launch", tenant, job, dir}
}

func cronFile(dir string) string {
	return "/etc/cron.d/limitbed-" + strings.ReplaceAll(strings.TrimPrefix(dir, jobRoot+"/"), "/", "-")
}

// cronInstallArgv writes the cron entry. The entry guards itself with a marker so that it runs the
// job once even if it is still installed at the next minute.
func cronInstallArgv(job, dir string) []string {
	line := fmt.Sprintf("* * * * * %s [ -e %s/started ] || sh %s\n", tenant, dir, job)
	return []string{"sh", "-c", `umask 022; printf '%s' "$1" > "$2.tmp" && mv "$2.tmp" "$2"`, "cron-install", line, cronFile(dir)}
}

func cronRemoveArgv(_, dir string) []string { return []string{"rm", "-f", cronFile(dir)} }

// cronPokeArgv moves the entry's and /etc/cron.d's mtimes to now. cron rereads its tables only when
// a modification time differs from the one it recorded, at one-second resolution: an entry written
// in the same second as cron's scan (at its start, or at a minute boundary) would otherwise never be
// loaded. A later mtime makes the next scan load it.
func cronPokeArgv(_, dir string) []string {
	return []string{"sh", "-c", `[ -e "$1/started" ] || touch "$2" /etc/cron.d`, "cron-poke", dir, cronFile(dir)}
}
