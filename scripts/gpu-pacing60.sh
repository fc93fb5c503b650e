#!/usr/bin/env bash
# The library's own pacing at 60 % force on a real GPU, 24 s runs of launchprobe (graph, mix, uniform),
# 1 s windows over the unlimited rate, and the GPU's utilisation every 0.5 s beside them (a backlog
# queued by the calibration shows as 100 %). Run after scripts/gpu-check.sh built $OUT (docs/benchmarks.md).
out=${OUT:-$PWD/build-gpu}; probe=$out/bin/hamicore-launchprobe
for w in graph mix uniform; do
	args=(--workload $w); [ $w = uniform ] && args=(--kernel-us 1000)
	free=$("$probe" --seconds 8 "${args[@]}" | sed 's/.*"busy_fraction":\([0-9.]*\).*/\1/')
	d=$(mktemp -d)
	nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i 0 -lms 500 > $d/util &
	sp=$!
	r=$(env LD_PRELOAD=$out/lib/libvgpu.so CUDA_DEVICE_SM_LIMIT=60 GPU_CORE_UTILIZATION_POLICY=force CUDA_DEVICE_MEMORY_SHARED_CACHE=$d/usage.cache \
		"$probe" --seconds 24 "${args[@]}" 2>/dev/null)
	kill $sp; wait $sp 2>/dev/null
	echo "$w 60 % (unlimited $free): elapsed $(sed 's/.*"elapsed_s":\([0-9.]*\).*/\1/' <<<"$r"); 1 s: $(sed 's/.*"windows":\[\([^]]*\)\].*/\1/' <<<"$r" | awk -F, -v f=$free '{ for (i = 1; i <= NF; i++) printf "%.3f ", $i / f; print "" }')"
	echo "  util every 0.5 s: $(tr '\n' ' ' < $d/util)"
done
