#!/usr/bin/env bash
# section: 06 compute — the library's compute limit alone on the GPU: the ~1 ms spin kernel at 30 % force over a whole run (CUDA runtime), then limitbed bench compute --real: uniform, shape mix and graph replay at 30/60 % force and default alone, every 10 s window after 2 s within the limit ± 0.02 (about 3 min at BENCH_SECONDS=12)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
need "$BUILD/bin/hamicore-launchprobe" hamicore-launchprobe
bench_s=${BENCH_SECONDS:-12}
spin_s=${SPIN_SECONDS:-20}

if [ -x "$REAL/cudart_probe" ]; then
	free_run=$("$REAL/cudart_probe" spin "$spin_s" 2>&1)
	# A pod of its own: the first process stamps the limits into usage.cache (first writer wins).
	mkdir -p "$WORK/pod-compute"
	lim_run=$(env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT_0=3000m \
		CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/pod-compute/usage.cache" CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY=force \
		"$REAL/cudart_probe" spin "$spin_s" 2>&1)
	echo "unlimited: $free_run"
	echo "limit 30:  $lim_run"
	a=$(json_num launches_per_s "$lim_run") b=$(json_num launches_per_s "$free_run")
	# Over the whole run, start-up included: the first 1.5 s run unthrottled (the limiter's
	# full-load calibration, docs/hamicore.md), so 20 s at 30 % come to about 0.36..0.40.
	range_check "spin kernel at 30 % force, whole run" "$(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0 && a != "") printf "%.3f", a / b }')" \
		"of unlimited" 0.25 0.45 --noise 0.02 --got "unlimited $b launches/s, limited $a"
else
	skip "spin kernel at 30 % force, whole run" "no CUDA toolkit (nvcc) here to build harness/gpu/cudart_probe.cu"
fi

# Every workload of launchprobe unlimited and at 30 and 60 % force, and default alone with the
# node monitor's decision running: every 10 s window after 2 s within the limit ± 0.02, default
# alone ≥ 0.95 of unlimited. One check and one 1 s series per run (--records).
"$LB" bench compute --real --root "$ROOT" --build "$BUILD" --seconds "$bench_s" --limits 30,60 --policies force,default \
	--windows --records "$RUN" --section "$SECTION" ${COMPUTE_BENCH_ARGS:-}
rc=$?
[ $rc = 0 ] || [ $rc = 1 ] || rec "bench compute" fail --note "limitbed bench compute exited $rc: it could not run (its error is above)"
[ $rc = 1 ] && fail=1
done_section
