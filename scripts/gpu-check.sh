#!/usr/bin/env bash
# The GPU tier from a checkout, for a GPU machine that has Go: builds the Go binaries into
# $OUT/bin, then runs the bundle's entry (harness/gpu/gpu-check) with the C built into $OUT and
# the report under $OUT/reports/. A GPU machine without Go runs the bundle instead: make
# gpu-bundle elsewhere, then tar xf limitbed-gpu.tar.gz && cd limitbed-gpu && sudo ./gpu-check
# (docs/gpu-report.md). The arguments are the entry's:
#
#   OUT=$PWD/build-gpu scripts/gpu-check.sh [--report DIR] [--previous LAST.json] [SECTION...]
#   scripts/gpu-check.sh --list
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/build-gpu}
if command -v go >/dev/null 2>&1; then
	mkdir -p "$out/bin"
	CGO_ENABLED=1 go build -trimpath -o "$out/bin/" ./harness/cmd/limitbed ./plugin/cmd/vgpu-scheduler
	CGO_ENABLED=0 go build -trimpath -o "$out/bin/" ./plugin/cmd/regiondump ./harness/cmd/gpureport
elif [ ! -x "$out/bin/limitbed" ]; then
	echo "gpu-check.sh: no Go here and no $out/bin/limitbed: use the bundle (make gpu-bundle on a machine with Go; docs/gpu-report.md)" >&2
	exit 2
fi
GPU_CHECK_BIN=$out/bin GPU_CHECK_BUILD=$out GPU_CHECK_REPORTS=${GPU_CHECK_REPORTS:-$out/reports} exec harness/gpu/gpu-check "$@"
