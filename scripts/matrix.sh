#!/usr/bin/env bash
# make matrix: set up what the compatibility matrix needs, run it, print the table, write matrix.md
# and matrix.json at the repository root, and exit 1 when a cell differs from
# testdata/matrix/expected.json (2 when it could not run at all).
#
# Set-up, each step printed and quick when already done:
#   as root   scripts/install-deps.sh (Debian packages, Go modules, Docker engine up, as make test)
#   always    make c (fakegpu, libvgpu.so and its v2.10 profile), the workload image when Docker
#             answers, build/bin/limitbed
# Without root and without a Docker engine it stops with exit 2 and the command that fixes it: the
# ssh and cron cells need a container with sshd and cron, which only the Docker backend has.
#
# Arguments go to `limitbed matrix` unchanged (e.g. --core-old=PATH, --plugin-old=PATH
# --plugin-old-args='--flag={kubeconfig} ...', --methods=exec,ssh). The matrix runs on Docker only:
# the host backend has no sshd or cron and is not offered (limitbed matrix says so, exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
say() { echo "matrix: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then
	say "set-up: scripts/install-deps.sh"
	scripts/install-deps.sh 2>&1 | sed 's/^/  /' >&2
elif ! docker info >/dev/null 2>&1; then
	say "no Docker engine answers and this is not root, so nothing can be installed or started."
	say "fix: sudo scripts/install-deps.sh   (Debian's docker.io, dockerd started), then make matrix again"
	say "     or run it as root: sudo make matrix"
	exit 2
fi

say "set-up: C artefacts (make c)"
make -s c

if docker info >/dev/null 2>&1; then
	say "set-up: workload image (scripts/workload-image.sh)"
	scripts/workload-image.sh 2>&1 | sed 's/^/  /' >&2
fi

say "set-up: limitbed CLI (build/bin/limitbed)"
mkdir -p build/bin
go build -o build/bin/limitbed ./harness/cmd/limitbed
say "set-up done in $(($(date +%s) - start)) s"

rc=0
build/bin/limitbed matrix --root "$PWD" "$@" || rc=$?
say "finished in $(($(date +%s) - start)) s (exit $rc)"
exit "$rc"
