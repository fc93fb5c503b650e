#!/usr/bin/env bash
# make -C hamicore bench: the cost of libvgpu.so on fakegpu, as a Markdown table.
#   instructions (callgrind) per cuMemAlloc+cuMemFree pair and per cuLaunchKernel, with and without
#   the library: (run with N iterations) - (run with 0 iterations), divided by N, so process start
#   and initialisation cancel out; init cost = first-call instructions and wall time.
set -euo pipefail
out=${1:?usage: bench.sh OUT}
N=${BENCH_N:-10000}
root=$(cd "$(dirname "$0")/../.." && pwd)
probe=$out/bin/hamicore-allocprobe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v valgrind >/dev/null || { echo "bench: valgrind not installed" >&2; exit 1; }
base=(LD_LIBRARY_PATH="$out/lib" FAKEGPU_PROFILE=a16-16q FAKEGPU_PROFILE_DIR="$root/fakegpu/profiles"
	FAKEGPU_STATE_DIR="$tmp/gpu" FAKEGPU_LAUNCH_NS=0)
mkdir -p "$tmp/gpu"
lim=(LD_PRELOAD="$out/lib/libvgpu.so" CUDA_DEVICE_MEMORY_LIMIT_0=3000m CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/usage.cache")

# instr ENV... -- ARGS: total instructions of one run under callgrind.
instr() {
	local envs=() f="$tmp/cg.$RANDOM"
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file="$f" "$probe" "$@" >/dev/null 2>&1
	awk '/^summary:|^totals:/ {print $2; exit}' "$f"
}
# loop body only: alloc/free pairs, or launches (allocprobe runs --loop N pairs then N launches;
# run the two halves separately through BENCH_WHAT).
per_iter() { # ENV... : prints instructions per (pair + launch) for N
	local a b
	a=$(instr "$@" -- --loop "$N")
	b=$(instr "$@" -- --loop 0)
	echo $(((a - b) / N))
}
# Separate pair and launch costs: --loop runs N pairs then N launches; measure launches alone by
# disabling allocations (a 0-byte alloc still goes through both paths, so use two N values).
native=$(per_iter "${base[@]}")
withlib=$(per_iter "${base[@]}" "${lim[@]}")

# Launch only: allocprobe --loop with FAKEGPU_FAIL_ALLOC would change the path; instead time
# launches by running N launches + N pairs vs 2N launches + N pairs is not possible with one
# knob, so a dedicated run: BENCH_LAUNCH_ONLY=1 makes allocprobe skip the pairs.
launch_native=$(BENCH_LAUNCH_ONLY=1 per_iter "${base[@]}" BENCH_LAUNCH_ONLY=1)
launch_lib=$(BENCH_LAUNCH_ONLY=1 per_iter "${base[@]}" "${lim[@]}" BENCH_LAUNCH_ONLY=1)
pair_native=$((native - launch_native))
pair_lib=$((withlib - launch_lib))

# Init: instructions and wall time of a run with one pair (first call does the init).
i_native=$(instr "${base[@]}" -- --loop 1)
i_lib=$(instr "${base[@]}" "${lim[@]}" -- --loop 1)
wall() {
	local best=999999 t0 t1 d
	for _ in 1 2 3 4 5 6 7 8 9 10 11; do
		t0=$(date +%s%N)
		env "$@" "$probe" --loop 1 >/dev/null 2>&1
		t1=$(date +%s%N)
		d=$(((t1 - t0) / 1000))
		[ "$d" -lt "$best" ] && best=$d
	done
	echo "$best"
}
w_native=$(wall "${base[@]}")
w_lib=$(wall "${base[@]}" "${lim[@]}")
# In-process: the first driver call (cuInit), which with the library runs its initialization:
# attaching an existing region (the usual case: every process but a pod's first) and creating it.
first_call() { # ENV... : best of 21, microseconds
	local best=999999 d
	for _ in $(seq 1 21); do
		[ -n "${FRESH:-}" ] && rm -f "$tmp/init.cache"
		d=$(env "$@" "$probe" --init-us 2>/dev/null) || d=999999
		[ "$d" -lt "$best" ] && best=$d
	done
	echo "$best"
}
icache=(LD_PRELOAD="$out/lib/libvgpu.so" CUDA_DEVICE_MEMORY_LIMIT_0=3000m CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/init.cache")
f_native=$(first_call "${base[@]}")
f_attach=$(first_call "${base[@]}" "${icache[@]}")
f_create=$(FRESH=1 first_call "${base[@]}" "${icache[@]}")

echo "| figure (fakegpu, N=$N) | without libvgpu | with libvgpu | added | target |"
echo "|---|---|---|---|---|"
echo "| instructions per cuMemAlloc+cuMemFree pair | $pair_native | $pair_lib | $((pair_lib - pair_native)) | ≤ 300 |"
echo "| instructions per unthrottled cuLaunchKernel | $launch_native | $launch_lib | $((launch_lib - launch_native)) | ≤ 50 |"
echo "| instructions of a whole run with one pair (init) | $i_native | $i_lib | $((i_lib - i_native)) | — |"
echo "| wall time of that run, best of 11 (µs) | $w_native | $w_lib | $((w_lib - w_native)) | ≤ 1000 |"
echo "| first call (cuInit), region exists, best of 21 (µs) | $f_native | $f_attach | $((f_attach - f_native)) | ≤ 1000 |"
echo "| first call (cuInit), region created, best of 21 (µs) | $f_native | $f_create | $((f_create - f_native)) | ≤ 1000 |"
