#!/usr/bin/env bash
# section: 02 paths — the allocation-path programs (hamicore/test/paths: VMM, contexts, pools, graphs, arrays, device order, threads, fork, dlsym, descriptors) natively, in an env session and in a login session under a 3000 MiB limit (about 2 min)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
need "$BUILD/bin/path-vmm" "the allocation-path programs"
pod_limits

# paths MODE RUNNER...: each program prints "PASS <name> (<mode>)"; exit 77 = cannot run here
# (device order needs 2 GPUs).
paths() {
	local mode=$1 p got rc
	shift
	for p in vmm ctx pool graph array order stress fork dlsym fds; do
		local pre=()
		[ "$p" = order ] && pre=(CUDA_VISIBLE_DEVICES=1,0)
		# A real cuMemAlloc/cuMemFree pair costs ~75 us: 8 threads x 100k pairs would take minutes.
		[ "$p" = stress ] && pre=(PATH_ITERS="${PATH_STRESS_ITERS:-5000}")
		if [ "$p" = dlsym ]; then
			[ "$mode" != env ] && pre+=(LD_PRELOAD="$BUILD/lib/path-dlsym-shim.so") # login: after ld.so.preload
			[ "$mode" = env ] && pre+=(LD_PRELOAD="$LIB $BUILD/lib/path-dlsym-shim.so")
		fi
		local expect=limited
		[ "$mode" = native ] && expect=native
		got=$("$@" "${pre[@]}" PATH_EXPECT=$expect "$BUILD/bin/path-$p" 2>&1)
		rc=$?
		if [ $rc = 77 ]; then
			skip "$mode path-$p" "$(tail -1 <<<"$got")"
			continue
		fi
		check "$mode path-$p" "PASS " "$(grep -E '^(FAIL|PASS) ' <<<"$got" | tr '\n' ' ')"
		grep '^info ' <<<"$got" | sed "s/^/     $mode path-$p: /" # the driver's figures, for fakegpu
	done
}
paths native env
paths env env LD_PRELOAD="$LIB" "${envlimit[@]}"
if is_root; then
	paths login in_container "$LIB" PATH_LOGIN=1
else
	skip "login path-*" "$ROOT_WHY"
fi
done_section
