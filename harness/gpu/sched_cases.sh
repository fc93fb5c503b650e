#!/usr/bin/env bash
# The node scheduler's cases on a real GPU, with everything needed to say where the time goes:
# pods made as the device plugin makes them (limits file, cache directory, grant file, each pod a
# private mount namespace: hamicore/test/privatens), PyTorch workloads (sched_workload.py) whose
# steps are stamped with the GPU's own timer, vgpu-scheduler writing its trace (every grant, first
# launch, revocation, drain and clock reading), and nvidia-smi's clock, power and temperature every
# 50 ms beside them. Run as root on a GPU machine; needs python3 with torch.
#
#   sched_cases.sh OUTDIR SECONDS CASE...
#
# A CASE is NAME=POD[,POD...]; a POD is MODE@LIMIT[/POLICY][+DELAY_S][xN] (N pods alike):
#   ref-gemm=gemm@0               the workload alone and unlimited: no library, no scheduler
#   pair=gemm@30,gemm@50          two pods under the scheduler, force (the default policy)
#   late=gemm@30,gemm@50+6        the second pod starts 6 s later
#   dflt=gemm@30/default,gemm@50/default
#   eight=gemm@10x8
# MODE is a sched_workload.py mode (gemm graph sync membw train). Each case leaves OUTDIR/NAME/:
# pN.json (the workload's windows and stamps), pN.err, trace.jsonl, scheduler.log, smi.csv,
# metrics.txt. Environment: BIN (vgpu-scheduler, limitbed; default build/bin), LIB (libvgpu.so;
# default build/lib/libvgpu.so), SCHED_ARGS (extra scheduler flags), STAMPS (slots per pod, 40000),
# PRIVATENS_ARGS (extra privatens flags: a fakegpu state directory to --bind), PY (the python that
# has PyTorch; default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${BIN:-$root/build/bin}
lib=${LIB:-$root/build/lib/libvgpu.so}
stamps=${STAMPS:-40000}
[ $# -ge 3 ] || { echo "usage: sched_cases.sh OUTDIR SECONDS CASE..." >&2; exit 2; }
out=$1 secs=$2
shift 2
[ "$(id -u)" -eq 0 ] || { echo "sched_cases: needs root (privatens)" >&2; exit 2; }
for b in "$bin/vgpu-scheduler" "$bin/limitbed" "$lib"; do
	[ -e "$b" ] || { echo "sched_cases: $b missing (BIN=, LIB=)" >&2; exit 2; }
done
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
nv=()
[ -d /usr/local/nvidia ] && nv=(--bind /usr/local/nvidia) # the driver's folder on some machines
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >"$out/gpu.csv"

# pods SPEC: one line per pod, "mode limit policy delay".
pods() {
	local p mode rest limit policy delay n i
	IFS=, read -ra ps <<<"$1"
	for p in "${ps[@]}"; do
		mode=${p%%@*} rest=${p#*@} n=1 delay=0 policy=force
		[[ $rest == *x* ]] && n=${rest##*x} rest=${rest%x*}
		[[ $rest == *+* ]] && delay=${rest##*+} rest=${rest%+*}
		[[ $rest == */* ]] && policy=${rest##*/} rest=${rest%/*}
		limit=$rest
		for ((i = 0; i < n; i++)); do echo "$mode $limit $policy $delay"; done
	done
}

run_case() {
	local name=$1 spec=$2 dir=$out/$1 hook i=0 mode limit policy delay key spid smipid sched=0
	local -a pids=()
	dir=$out/$name hook=$(mktemp -d /tmp/sched-case.XXXXXX)
	mkdir -p "$dir"
	while read -r mode limit policy delay; do
		[ "$limit" -gt 0 ] && sched=1
	done < <(pods "$spec")
	if [ $sched = 1 ]; then
		i=0
		while read -r mode limit policy delay; do
			"$bin/limitbed" bench pod --hook "$hook" --gpu "$uuid" --container "name=p$i,limit=$limit,policy=$policy" >/dev/null ||
				{ echo "sched_cases: $name: cannot make pod p$i" >&2; return 1; }
			i=$((i + 1))
		done < <(pods "$spec")
		# shellcheck disable=SC2086
		"$bin/vgpu-scheduler" --hook-path="$hook" --metrics-address=127.0.0.1:19395 --trace-file="$dir/trace.jsonl" \
			-v=2 ${SCHED_ARGS:-} 2>"$dir/scheduler.log" &
		spid=$!
	fi
	date +%s%N >"$dir/start_ns"
	nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
		--format=csv,noheader,nounits -i 0 -lms 50 >"$dir/smi.csv" 2>/dev/null &
	smipid=$!
	i=0
	while read -r mode limit policy delay; do
		key=p${i}_main
		(
			sleep "$delay"
			w=("${PY:-python3}" "$here/sched_workload.py" --mode "$mode" --seconds "$secs" --stamps "$stamps" --out "$dir/p$i.json")
			if [ "$limit" -gt 0 ]; then
				# shellcheck disable=SC2086
				"$root/hamicore/test/privatens" ${PRIVATENS_ARGS:-} --preload "$lib" --override-env "$hook/vgpu/containers/$key.limits" \
					"${nv[@]}" --bind "$root" --bind "$dir" --mount "/usr/local/vgpu=$hook/vgpu/containers/$key" \
					--mount-ro "/usr/local/vgpu/sched.grant=$hook/vgpu/sched/$key.grant" -- \
					/usr/bin/env CUDA_VISIBLE_DEVICES="$uuid" LIBCUDA_LOG_LEVEL=3 PATH="$PATH" "${w[@]}"
			else
				CUDA_VISIBLE_DEVICES="$uuid" "${w[@]}"
			fi
		) >"$dir/p$i.out" 2>"$dir/p$i.err" &
		pids+=($!)
		echo "p$i $mode $limit $policy $delay" >>"$dir/pods"
		i=$((i + 1))
	done < <(pods "$spec")
	wait "${pids[@]}"
	if [ $sched = 1 ]; then
		"${PY:-python3}" -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:19395/metrics", timeout=5).read().decode())' \
			>"$dir/metrics.txt" 2>&1
		# What the scheduler learned of the card (its speed, the clock it took for full load, how
		# often it calibrated) beside the case's summary: the full-load clock against the sustained
		# one in smi.csv is how a calibration error shows.
		grep -E '^vgpu_scheduler_gpu_(speed|sm_clock_mhz|full_load_sm_clock_mhz|calibrations_total|owed_idle_seconds_total)' \
			"$dir/metrics.txt" | sed "s/^/case $name: /" || echo "case $name: the scheduler exported no calibration metrics" >&2
		kill -TERM "$spid"
		wait "$spid"
	fi
	kill -TERM "$smipid" 2>/dev/null
	wait "$smipid" 2>/dev/null
	rm -rf "$hook"
	echo "case $name done: $(ls "$dir" | tr '\n' ' ')"
}

for c in "$@"; do
	run_case "${c%%=*}" "${c#*=}"
done
