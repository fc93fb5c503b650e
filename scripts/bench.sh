#!/usr/bin/env bash
# `make bench`: every benchmark the project has, each printing its own table. The figures recorded
# in docs/benchmarks.md come from this command (on the machine named there).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f hamicore/Makefile ] && grep -q '^bench:' hamicore/Makefile; then
	printf '\n=== libvgpu.so overhead on fakegpu (callgrind instructions)\n'
	make -s -C hamicore bench OUT="$PWD/build"
fi
printf '\n=== compute limit on fakegpu: limitbed bench compute (uniform, shape mix, graph; force, disable, default)\n'
make -s c OUT="$PWD/build"
go run ./harness/cmd/limitbed bench compute --build "$PWD/build" --seconds "${BENCH_COMPUTE_SECONDS:-12}" --windows
if [ -d plugin ]; then
	printf '\n=== device plugin Allocate, the monitor'"'"'s scrape and accounting period (Go benchmarks)\n'
	go test -run '^$' -bench . -benchmem -count=1 ./plugin/...
fi
