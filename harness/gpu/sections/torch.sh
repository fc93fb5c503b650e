#!/usr/bin/env bash
# section: 07 torch — the library's compute limit under a real BLAS: PyTorch bf16 4096² GEMMs, eager and replayed from a CUDA graph, at 30 and 60 % force, every 10 s window after 2 s within the limit ± 0.02 (about 2 min at BENCH_SECONDS=12; needs torch)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
have_torch || skip_section "$TORCH_WHY"
bench_s=${BENCH_SECONDS:-12}
tc=$ROOT/harness/gpu/torch_compute.py
for mode in eager graph; do
	if ! "$PY" "$tc" run --mode "$mode" --seconds "$bench_s" >"$WORK/torch-$mode-free.json" 2>"$WORK/torch.err"; then
		rec "torch $mode unlimited run" fail --got "$(tail -c 400 "$WORK/torch.err")"
		continue
	fi
	series "$SECTION-$mode" "torch: PyTorch $mode GEMMs under the library, achieved over unlimited per second" seconds \
		"share of the unlimited rate" "limit 30 %=0.30" "limit 60 %=0.60"
	for lim in 30 60; do
		mkdir -p "$WORK/pod-torch-$mode-$lim"
		env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/pod-torch-$mode-$lim/usage.cache" \
			CUDA_DEVICE_SM_LIMIT=$lim GPU_CORE_UTILIZATION_POLICY=force \
			"$PY" "$tc" run --mode "$mode" --seconds "$bench_s" >"$WORK/torch-$mode-$lim.json" 2>>"$WORK/torch.err"
		got=$("$PY" "$tc" judge "$WORK/torch-$mode-free.json" "$WORK/torch-$mode-$lim.json" --limit $lim \
			--series "$RUN/series/$SECTION-$mode.csv" --line "force $lim %" 2>&1)
		echo "$got"
		range_check "torch $mode GEMMs at $lim % force, worst 10 s window" "$(sed -n 's/.*; worst \([0-9.]*\)$/\1/p' <<<"$got")" \
			"of unlimited" "$(awk -v l=$lim 'BEGIN { print l / 100 - 0.02 }')" "$(awk -v l=$lim 'BEGIN { print l / 100 + 0.02 }')" \
			--noise 0.02 --got "$(sed 's/; worst .*//' <<<"$got" | cut -c1-300)"
	done
done
done_section
