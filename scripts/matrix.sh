#!/usr/bin/env bash
# make matrix: build what the compatibility matrix needs (the C libraries and tools, the workload
# image when Docker answers, the limitbed CLI), run it on the best available backend, print the
# table, write matrix.md and matrix.json at the repository root, and exit 1 when a cell differs from
# testdata/matrix/expected.json. Arguments go to `limitbed matrix` unchanged (e.g. --core-old=PATH,
# --plugin-old=PATH --plugin-old-args='--flag={kubeconfig} ...', --backend=host, --methods=exec,ssh);
# LIMITBED_BACKEND=docker|host forces a backend.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

echo "matrix: building C artefacts (make c)" >&2
make -s c

if [ "${LIMITBED_BACKEND:-}" != host ]; then
	if ! docker info >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ "${LIMITBED_BACKEND:-}" = docker ]; then
		scripts/docker-up.sh >&2
	fi
	if docker info >/dev/null 2>&1; then
		echo "matrix: workload image" >&2
		scripts/workload-image.sh >&2
	fi
fi

echo "matrix: building the limitbed CLI" >&2
mkdir -p build/bin
go build -o build/bin/limitbed ./harness/cmd/limitbed

rc=0
build/bin/limitbed matrix --root "$PWD" "$@" || rc=$?
echo "matrix: finished in $(($(date +%s) - start)) s (exit $rc)" >&2
exit "$rc"
