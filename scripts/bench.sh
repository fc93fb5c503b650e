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
printf '\n=== shared GPUs on fakegpu: limitbed bench compute --scenario (N containers, judged by completed work)\n'
# A run that judged containers out of bounds is a figure (the library held no shared GPU before the
# per-GPU scheduler); a run that could not judge is a failure.
for sc in force-30-50-mix force-8x8-gpus; do
	if ! out=$(go run ./harness/cmd/limitbed bench compute --build "$PWD/build" --scenario "$sc" --tolerance 0.03 2>&1); then
		grep -q 'OUT OF BOUNDS' <<<"$out" || { echo "$out"; exit 1; }
	fi
	echo "$out"
done
printf '\n=== the node scheduler on fakegpu (vgpu-scheduler as a process; root: private mount namespaces)\n'
if [ "$(id -u)" != 0 ]; then
	echo "skipped: needs root (each container in a private mount namespace with its grant file)"
else
	make -s go OUT="$PWD/build"
	if command -v valgrind >/dev/null; then
		go run ./harness/cmd/limitbed bench gate --build "$PWD/build"
	else
		echo "bench gate skipped: needs valgrind"
	fi
	# Switching cost: two busy containers whose limits sum to 100 %: the GPU time not busy.
	# Scheduler CPU: 8 GPUs x 8 containers.
	for args in "--container name=a,limit=50 --container name=b,limit=50" "--scenario force-30-50-mix" "--scenario force-8x8-gpus"; do
		# shellcheck disable=SC2086 # the container specs are separate words
		if ! out=$(go run ./harness/cmd/limitbed bench compute --build "$PWD/build" --scheduler $args --tolerance 0.03 2>&1); then
			grep -q 'OUT OF BOUNDS' <<<"$out" || { echo "$out"; exit 1; }
		fi
		echo "$out"
	done
fi
if [ -d plugin ]; then
	printf '\n=== device plugin Allocate, the monitor'"'"'s scrape and accounting period (Go benchmarks)\n'
	go test -run '^$' -bench . -benchmem -count=1 ./plugin/...
fi
