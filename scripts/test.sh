#!/usr/bin/env bash
# What `make test` (and so CI) runs: every tier this machine can run, in order of cost.
# A tier that cannot run here says why; the ones CI provides for (root, Docker) must not be skipped
# there — CI=true turns such a skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

# On a fresh machine `make test` alone must do everything: as root, install what is missing
# (idempotent and quick when all is there). Elsewhere, say what a skipped tier would need.
if [ "$(id -u)" -eq 0 ]; then
	step "dependencies"
	scripts/install-deps.sh
else
	echo "test: not root — not installing dependencies; tiers needing root or Docker will skip and say why"
fi

step "ABI: our CUDA/NVML declarations against the real headers"
scripts/abi-check.sh

step "C: build and unit tests"
make -s test-c

step "C: unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
make -s test-san

step "C: the threaded path programs (threads, fork) under ThreadSanitizer"
make -s test-tsan

if [ -f hamicore/Makefile ] && grep -q '^fuzz:' hamicore/Makefile; then
	step "C: limits-file reader under libFuzzer (bounded)"
	make -s -C hamicore fuzz OUT="$PWD/build" FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
fi

step "Go: vet and tests with -race"
scripts/test-go.sh
