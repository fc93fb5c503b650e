// Package tier is the one place a test says what it needs from the machine: root, a Docker engine,
// the kind tier, a tool, a GPU. Where the need is not met the test skips with a message naming the
// condition and how to provide it — except under CI=true for what CI provides (every tier but a
// GPU), where the skip is a failure: a CI run must never pass by skipping the tier that proves
// the design.
package tier

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/limitbed/limitbed/plugin/limitsfile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// Tier is something a test needs from the machine.
type Tier struct {
	name    string       // what is needed, as the message says it
	purpose string       // what the test needs it for ("" when the name says enough)
	provide string       // how to provide it
	ci      bool         // CI provides it: missing under CI=true is a failure
	probe   func() error // nil: the caller probes and reports with Unavailable
}

// Root: the tests run as root (mount namespaces, mknod, cgroups). CI runs as root.
var Root = Tier{name: "root", provide: "run the tests as root: sudo make test", ci: true, probe: func() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("running as uid %d", os.Geteuid())
	}
	return nil
}}

// Docker: a Docker engine answers. CI installs and starts one; callers probe it themselves through
// their sandbox backend and report a failure with Unavailable.
var Docker = Tier{name: "a Docker engine", provide: "start one with scripts/docker-up.sh", ci: true}

// Backend: some sandbox backend can start containers (Docker, or the host backend as root).
var Backend = Tier{name: "a container backend (Docker, or the host backend as root)",
	provide: "start Docker with scripts/docker-up.sh, or run as root", ci: true}

// HostBackend: the sandbox's host backend (private mount namespaces: root, unshare, nsenter,
// chroot, mount, setpriv), probed by the backend itself. CI runs as root with util-linux.
var HostBackend = Tier{name: "the host backend (root and private mount namespaces)",
	provide: "run the tests as root with util-linux installed: sudo make test", ci: true}

// Kind: the kind tier (make e2e: a Docker engine, the offline node image, a cluster). CI runs it.
var Kind = Tier{name: "the kind tier (a Docker engine and the offline kind node image)",
	provide: "make e2e sets it up (the node image alone: make node-image)", ci: true}

// Fixtures: ../shared/fixtures beside the checkout (data captured from unmodified upstream
// components), which CI's checkout has.
var Fixtures = Tier{name: "../shared/fixtures", provide: "check out the shared directory beside the repository", ci: true}

// NvidiaSMI: Debian's real nvidia-smi, extracted by scripts/nvidia-smi.sh (make test's dependencies).
var NvidiaSMI = Tier{name: "Debian's nvidia-smi", provide: "scripts/nvidia-smi.sh (scripts/install-deps.sh runs it)", ci: true}

// Unsanitized: the C artefacts built without sanitizers (SAN unset). go-nvml loads fakegpu's
// libnvidia-ml.so.1 into the Go process, where a sanitizer build cannot run; fakegpu's and
// hamicore's own C tests run the sanitizer builds. A build choice, not something CI lacks.
var Unsanitized = Tier{name: "a build without sanitizers (SAN unset)", purpose: "go-nvml in the Go process",
	provide: "run without SAN; the sanitizer builds are make test-san's", probe: func() error {
		if san := os.Getenv("SAN"); san != "" {
			return fmt.Errorf("SAN=%s", san)
		}
		return nil
	}}

// ModuleCache: the Go module cache holds a dependency's source (go list -m -f {{.Dir}}), which
// scripts/install-deps.sh downloads before CI's tests; the caller probes it.
var ModuleCache = Tier{name: "the Go module cache", provide: "go mod download (scripts/install-deps.sh runs it)", ci: true}

// HostLoginTools: the login machinery the host backend's launch methods use from the host itself
// (su, sudo, login, script, runuser); the caller probes it. The Docker backend's workload image
// has all of them, so CI covers every method there and does not install sudo on the host.
var HostLoginTools = Tier{name: "the host's login tools (su, sudo, login, script, runuser)",
	provide: "install them on the host (apt-get install sudo util-linux bsdutils); the Docker tier has them all"}

// CleanHost: a host that is not itself a limited node, with no /overrideEnv or /etc/ld.so.preload
// of its own, so that a test can show a container's copy does not leak onto it. CI's machine is
// fresh.
var CleanHost = Tier{name: "a host without its own /overrideEnv and /etc/ld.so.preload",
	provide: "run on a machine that is not a limited node (one with libvgpu.so installed has them)", ci: true,
	probe: func() error {
		for _, p := range []string{limitsfile.ContainerMountPath, paths.ContainerPreloadPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("the host has %s", p)
			}
		}
		return nil
	}}

// HAMiPlugin: a HAMi nvidia-device-plugin binary to run against the harness (the caller names the
// variable that points at it). CI has none: an upstream release is not part of the test bed.
var HAMiPlugin = Tier{name: "HAMi's nvidia-device-plugin binary", provide: "set the variable to its path"}

// GPU: a real NVIDIA GPU and driver. CI has none, so this stays a skip everywhere.
var GPU = Tier{name: "an NVIDIA GPU and driver", provide: "run on a GPU machine (the GPU tier: make gpu-bundle, then ./gpu-check there)", probe: func() error {
	return exec.Command("nvidia-smi", "-L").Run()
}}

// Tool: a command scripts/install-deps.sh installs (CI runs it before the tests).
func Tool(name string) Tier {
	return Tier{name: name + " installed", provide: "scripts/install-deps.sh installs it", ci: true, probe: func() error {
		_, err := exec.LookPath(name)
		return err
	}}
}

// For returns t with the purpose the test needs it for, which its messages then name.
func (t Tier) For(purpose string) Tier {
	t.purpose = purpose
	return t
}

// Name is what the tier needs, as its messages say it.
func (t Tier) Name() string { return t.name }

// CIProvides reports whether CI provides the tier, so that its absence fails under CI=true.
func (t Tier) CIProvides() bool { return t.ci }

// Probe checks the tier here: nil when present. A tier the caller probes itself (Docker, Backend,
// Kind, Fixtures, NvidiaSMI) has no probe here and reports so.
func (t Tier) Probe() error {
	if t.probe == nil {
		return fmt.Errorf("tier %s: no probe here (the caller probes it)", t.name)
	}
	return t.probe()
}

// CI reports whether this is a CI run (CI=true), where every tier CI provides must be present.
func CI() bool { return os.Getenv("CI") == "true" }

// Require probes every tier in turn and reports the first one missing with Unavailable. A tier
// without a probe of its own (Docker, Backend, Fixtures, NvidiaSMI) cannot be required: the caller
// probes and calls Unavailable, and Require fails the test to say so.
func Require(tb testing.TB, tiers ...Tier) {
	tb.Helper()
	for _, t := range tiers {
		if t.probe == nil {
			tb.Fatalf("tier.Require(%s): this tier has no probe here; probe it and call tier.Unavailable", t.name)
		}
		if err := t.Probe(); err != nil {
			Unavailable(tb, t, err.Error())
		}
	}
}

// Unavailable ends the test for want of t: a skip naming the condition, why it is missing and
// how to provide it, or — under CI=true, for a tier CI provides — a failure with the same words.
func Unavailable(tb testing.TB, t Tier, why string) {
	tb.Helper()
	msg := Message(t, why)
	if CI() && t.ci {
		tb.Fatalf("%s (CI=true: CI provides this, so this is a failure, not a skip)", msg)
	}
	tb.Skip(msg)
}

// Message is the line a missing tier reports: what is needed, why it is missing, the fix.
func Message(t Tier, why string) string {
	need := "needs " + t.name
	if t.purpose != "" {
		need += " for " + t.purpose
	}
	if why == "" {
		return fmt.Sprintf("%s (%s)", need, t.provide)
	}
	return fmt.Sprintf("%s: %s (%s)", need, why, t.provide)
}
