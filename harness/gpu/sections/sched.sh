#!/usr/bin/env bash
# section: 11 sched — the node scheduler (vgpu-scheduler): two PyTorch pods on one GPU, 30 % + 50 % and 10 % + 90 % force, each pod's completed GEMMs per second over the workload's rate alone, every 10 s window after 2 s within its limit ± 0.02; plots each pod's share per second (about 2 min at SCHED_SECONDS=20; needs torch)
#
# Each pod is a PyTorch process in a private mount namespace set up as the device plugin sets up a
# container (its limits at /overrideEnv, its cache directory at /usr/local/vgpu, its grant file
# read-only at /usr/local/vgpu/sched.grant), vgpu-scheduler driving the grant files.
#
# What this section writes (the contract with the report and with the fidelity section, which
# runs the same cases on fakegpu; docs/gpu-report.md, "The sched section"):
#   records/sched.jsonl   per case and pod: "CASE: pod N % followed the scheduler" (pass/fail),
#                         "CASE: pod N % share, worst 10 s window" (figure, lo/hi = limit ± 0.02),
#                         the scheduler's metrics and the SM clock beside it (info)
#   series/sched-CASE.csv each pod's share per 1 s window, its limit as a reference line
#   sched/cases.tsv       one line per pod: case, pod, limit %, policy, start s, worst 10 s window,
#                         mean share after 2 s (tab-separated): what fidelity mirrors on fakegpu
# A new case is one more `sched_case NAME LIMIT...` line below (pods start together, force).
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
have_torch || skip_section "$TORCH_WHY"
is_root || skip_section "$ROOT_WHY"
[ -x "$BIN/vgpu-scheduler" ] || skip_section "no $BIN/vgpu-scheduler: an incomplete bundle (make gpu-bundle)"
command -v nvidia-smi >/dev/null || skip_section "no nvidia-smi on PATH (the GPU's UUID and clocks)"
sched_s=${SCHED_SECONDS:-20}
tc=$ROOT/harness/gpu/torch_compute.py
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
mkdir -p "$RUN/sched"
CUDA_VISIBLE_DEVICES=$uuid "$PY" "$tc" run --mode eager --seconds "$sched_s" >"$WORK/sched-free.json" 2>"$WORK/sched-free.err" ||
	skip_section "the unlimited PyTorch run failed: $(tail -c 300 "$WORK/sched-free.err")"

# sched_case NAME LIMIT...: one pod per limit (force), started together under vgpu-scheduler.
sched_case() {
	local name=$1 id=$SECTION-${1//+/-} hook=$WORK/sched-$1 spid smipid lim key got worst mean pids=() nv=()
	shift
	[ -d /usr/local/nvidia ] && nv=(--bind /usr/local/nvidia)
	mkdir -p "$hook"
	local refs=()
	for lim in "$@"; do refs+=("limit pod $lim %=$(awk -v l="$lim" 'BEGIN { print l / 100 }')"); done
	series "$id" "sched $name: each pod's share of its workload's unlimited rate, per second" seconds "share" "${refs[@]}"
	for lim in "$@"; do
		"$LB" bench pod --hook "$hook" --gpu "$uuid" --container "name=p$lim,limit=$lim,policy=force" >/dev/null
	done
	# The scheduler charges slices by the SM clock against its full-load figure (docs/plugin.md,
	# "Work, not time"): its metrics say what it read; nvidia-smi samples the clock beside it.
	"$BIN/vgpu-scheduler" --hook-path="$hook" --metrics-address=127.0.0.1:19395 2>"$hook/scheduler.log" &
	spid=$!
	nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -i 0 -lms 250 >"$hook/clocks.csv" &
	smipid=$!
	for lim in "$@"; do
		key=p${lim}_main
		"$ROOT/hamicore/test/privatens" --preload "$LIB" --override-env "$hook/vgpu/containers/$key.limits" \
			--bind "$ROOT" $(bind_build) "${nv[@]}" --mount "/usr/local/vgpu=$hook/vgpu/containers/$key" \
			--mount-ro "/usr/local/vgpu/sched.grant=$hook/vgpu/sched/$key.grant" -- \
			/usr/bin/env CUDA_VISIBLE_DEVICES="$uuid" LIBCUDA_LOG_LEVEL=3 \
			"$PY" "$tc" run --mode eager --seconds "$sched_s" >"$hook/$key.json" 2>"$hook/$key.err" &
		pids+=($!)
	done
	wait "${pids[@]}"
	"$PY" -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:19395/metrics", timeout=5).read().decode())' 2>&1 |
		grep -E '^vgpu_scheduler_(gpu_speed|gpu_sm_clock|gpu_full_load|gpu_calibrations|container_gpu_seconds)' | sed "s/^/scheduler $name: /" |
		tee "$hook/metrics.txt"
	kill -TERM $spid $smipid
	wait $spid
	wait $smipid 2>/dev/null
	full=$(sed -n 's/^scheduler [^:]*: vgpu_scheduler_gpu_full_load[^ ]* \([0-9.e+]*\)$/\1/p' "$hook/metrics.txt" | head -1)
	[ -n "$full" ] && [ "$full" != 0 ] && rec "$name: the scheduler's full-load SM clock" info --figure "$full" --unit MHz
	read -r clk watts busy n < <(awk -F', *' 'NR > 8 && $1 > 0 { c += $1; w += $2; u += $3; n++ }
		END { if (n) printf "%.0f %.0f %.0f %d\n", c / n, w / n, u / n, n }' "$hook/clocks.csv")
	[ -n "${clk:-}" ] && rec "$name: SM clock beside the pods (after 2 s)" info --figure "$clk" --unit MHz \
		--note "$watts W, GPU busy $busy %, $n samples of nvidia-smi every 250 ms"
	for lim in "$@"; do
		key=p${lim}_main
		check "$name: pod $lim % followed the scheduler" "launches follow the node scheduler" "$(cat "$hook/$key.err")"
		got=$("$PY" "$tc" judge "$WORK/sched-free.json" "$hook/$key.json" --limit "$lim" --tol 0.02 \
			--series "$RUN/series/$id.csv" --line "pod $lim %" 2>&1)
		echo "$got"
		worst=$(sed -n 's/.*; worst \([0-9.]*\)$/\1/p' <<<"$got")
		mean=$(sed -n 's/.*; 1 s: \([^;]*\);.*/\1/p' <<<"$got" | awk '{ s = 0; n = 0; for (i = 3; i <= NF; i++) { s += $i; n++ } if (n) printf "%.4f", s / n }')
		range_check "$name: pod $lim % share, worst 10 s window" "$worst" share \
			"$(awk -v l="$lim" 'BEGIN { print l / 100 - 0.02 }')" "$(awk -v l="$lim" 'BEGIN { print l / 100 + 0.02 }')" \
			--noise 0.02 --got "$(sed 's/; worst .*//' <<<"$got" | cut -c1-300)"
		printf '%s\tp%s\t%s\tforce\t0\t%s\t%s\n' "$name" "$lim" "$lim" "$worst" "$mean" >>"$RUN/sched/cases.tsv"
	done
	echo "scheduler: $(grep -c . "$hook/scheduler.log") log lines; $(tail -1 "$hook/scheduler.log")"
}

sched_case 30+50 30 50
sched_case 10+90 10 90
done_section
