#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for `make test`. Idempotent: safe to run again.
# Needs root (CI runs as root); prints what it does.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: needs root (apt-get); run it with sudo, or install the packages listed in $0 yourself" >&2
	exit 1
fi

# NVIDIA's nvml.h (libnvidia-ml-dev) lives in Debian's non-free component.
enable_nonfree() {
	local f=/etc/apt/sources.list.d/debian.sources
	if [ -f "$f" ]; then
		if grep -q '^Components:' "$f" && ! grep -q '^Components:.*non-free\b' "$f"; then
			sed -i 's/^Components:.*/Components: main contrib non-free non-free-firmware/' "$f"
			return 0
		fi
	elif [ -f /etc/apt/sources.list ] && ! grep -qE '^deb .* non-free( |$)' /etc/apt/sources.list; then
		sed -i -E 's/^(deb .* main)( .*)?$/\1 contrib non-free non-free-firmware/' /etc/apt/sources.list
		return 0
	fi
	return 1
}

packages=(
	make gcc libc6-dev            # C builds
	clang llvm libclang-rt-14-dev # libFuzzer and sanitizers with clang
	libnvidia-ml-dev              # the real nvml.h for make abi-check
	valgrind                      # callgrind instruction counts (make bench)
	util-linux                    # unshare, mount: private mount namespaces for login-session tests
	debootstrap                   # rootfs of the workload and kind node images (no image registry)
	busybox-static                # the plugin image's install step and the Docker probe image
	jq ca-certificates git
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	enable_nonfree || true
	echo "install-deps: apt-get install ${missing[*]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	echo "install-deps: Debian packages already present"
fi

# Debian's nvidia-smi (non-free), extracted into the cache and never installed (scripts/nvidia-smi.sh
# says why): the tests that run the real nvidia-smi on fakegpu and the workload image use it.
policy=$(apt-cache policy nvidia-smi 2>/dev/null || true) # not piped into grep -q: pipefail would see SIGPIPE
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
	enable_nonfree || true
	apt-get update -q
fi
if smi=$(scripts/nvidia-smi.sh); then
	echo "install-deps: nvidia-smi: $smi"
elif [ "${CI:-}" = true ]; then
	echo "install-deps: Debian's nvidia-smi could not be had (above); CI needs it" >&2
	exit 1
else
	echo "install-deps: Debian's nvidia-smi could not be had (above): the tests that run it will say they skipped" >&2
fi

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH=/usr/local/go/bin:$PATH
fi
want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
have=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || true
if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
	echo "install-deps: Go $want or newer is needed (found: ${have:-none}); install it from your distribution or go.dev" >&2
	exit 1
fi
echo "install-deps: go mod download"
go mod download

# The container tier: Debian's docker.io, dockerd started if no engine answers.
scripts/docker-up.sh
