#!/usr/bin/env bash
# The path programs against fakegpu, each natively and under libvgpu.so (3000 MiB limit):
#   run.sh OUT [PROGRAM...]    default: every program; last line "N passed, N failed"
# PATH_LIB overrides the library (a sanitizer build), PATH_PRELOAD_EXTRA is preloaded before it
# (a sanitizer runtime). Each run gets its own device state and usage cache.
set -uo pipefail
out=${1:?usage: run.sh OUT [PROGRAM...]}
shift
root=$(cd "$(dirname "$0")/../../.." && pwd)
lib=${PATH_LIB:-$out/lib/libvgpu.so}
progs=("$@")
[ ${#progs[@]} -gt 0 ] || progs=(vmm ctx pool graph array order stress fork dlsym noregion fds)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
for p in "${progs[@]}"; do
	profile=h100-80g extra=()
	[ "$p" = order ] && profile=2x-a16-16q extra=(CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_MEMORY_LIMIT_1=1000m)
	shim= # the second interposer, preloaded after the library
	[ "$p" = dlsym ] && shim=$out/lib/path-dlsym-shim.so
	cache=usage.cache
	if [ "$p" = noregion ]; then
		shim=$out/lib/path-noregion-shim.so cache=no-such-dir/usage.cache
	fi
	for mode in native limited; do
		d=$tmp/$p-$mode
		mkdir -p "$d/gpu"
		env=(LD_LIBRARY_PATH="$out/lib" FAKEGPU_PROFILE_DIR="$root/fakegpu/profiles" FAKEGPU_PROFILE=$profile
			FAKEGPU_STATE_DIR="$d/gpu" FAKEGPU_LAUNCH_NS=1000 PATH_EXPECT=$mode PATH_FORK_CUDA=required "${extra[@]}")
		[ $mode = native ] && [ "$p" = dlsym ] && env+=(LD_PRELOAD="${PATH_PRELOAD_EXTRA:+$PATH_PRELOAD_EXTRA }$shim")
		[ $mode = limited ] && env+=(LD_PRELOAD="${PATH_PRELOAD_EXTRA:+$PATH_PRELOAD_EXTRA }$lib${shim:+ $shim}"
			CUDA_DEVICE_MEMORY_LIMIT_0=3000m CUDA_DEVICE_MEMORY_SHARED_CACHE="$d/$cache" LIBCUDA_LOG_LEVEL=1)
		# A backstop: no program may stall the suite (each bounds its own waits; fork's rounds
		# 40 s each at worst). 124 is timeout's exit code.
		timeout 900 env "${env[@]}" "$out/bin/path-$p" >"$d/log" 2>&1
		rc=$?
		if [ $rc = 0 ]; then
			passed=$((passed + 1))
			echo "PASS $p $mode"
		else
			failed=$((failed + 1))
			echo "FAIL $p $mode$([ $rc = 124 ] && echo ' (stalled: killed after 900 s)')"
			sed 's/^/    /' "$d/log"
		fi
	done
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
