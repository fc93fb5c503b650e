#!/usr/bin/env bash
# section: 12 fidelity — the same native probes on the card and on fakegpu with the card's profile (harness/gpu/cards.tsv), side by side: the card's identity, memory per context, allocation and VMM granularity, cuMemGetInfo's total, NVML's per-process sample period and attribution, the time slice between processes, the SM clock at full and partial load, launch latency, and the sched section's cases; each row has a bound and names the profile key to fix (about 2 min)
#
# A row is the card's figure against fakegpu's ± its tolerance (the larger of an absolute and a
# relative one); beyond it the row fails and its "fix" names the profile key (fakegpu/profiles,
# docs/fakegpu.md) or, where fakegpu has none, the source that models it.
source "$ROOT/harness/gpu/lib.sh"
[ -n "$PROFILE" ] || skip_section "no fakegpu profile for \"$CARD_NAME\": add one to fakegpu/profiles and a line to harness/gpu/cards.tsv (or GPU_CHECK_PROFILE=NAME)"
[ -f "$ROOT/fakegpu/profiles/$PROFILE.profile" ] || skip_section "the profile $PROFILE (harness/gpu/cards.tsv) is not in fakegpu/profiles"
probe=$REAL/gpuprobe
need "$probe" "gpuprobe (real driver)"
need "$BUILD/fake/lib/libcuda.so.1" "fakegpu"
need "$BUILD/bin/hamicore-launchprobe" hamicore-launchprobe
fakegpu_env
secs=${FIDELITY_SECONDS:-3}
add() { awk -v a="$1" -v b="$2" 'BEGIN { print a + b }'; }
wsecs=$(awk -v s="$secs" 'BEGIN { print (s < 1 ? 1 : s) }') # runs judged in 1 s windows: one at least
pf=$PROFILE.profile

# both VAR CMD...: CMD on the card into card_VAR, on fakegpu into fake_VAR (one JSON line each).
both() {
	local var=$1
	shift
	printf -v "card_$var" '%s' "$("$@" 2>&1 | tail -n 1)"
	printf -v "fake_$var" '%s' "$(env "${fake_env[@]}" "$@" 2>&1 | tail -n 1)"
	local c="card_$var" f="fake_$var"
	echo "card $var: ${!c}"
	echo "fake $var: ${!f}"
}

# row NAME KEY JSONKEY UNIT TOL TOL_REL FIX [note]: the figure JSONKEY of card_KEY against fake_KEY.
row() {
	local name=$1 key=$2 field=$3 unit=$4 tol=$5 rel=$6 fix=$7 note=${8:-}
	local c="card_$key" f="fake_$key"
	rec "$name" auto --figure "$(json_num "$field" "${!c}")" --fake "$(json_num "$field" "${!f}")" --unit "$unit" \
		--tol "$tol" --tol-rel "$rel" --key "$fix" --noise "$tol" --note "$note"
}

# The card's identity: what every profile states.
both card "$probe" card
cc() { sed -n 's/.*"compute_capability":"\([0-9.]*\)".*/\1/p' <<<"$1"; }
card_card+=",\"cc\":$(cc "$card_card")" fake_card+=",\"cc\":$(cc "$fake_card")"
row "NVML total memory" card memory_mib MiB 1 0 "$pf: memory_mib"
row "SM count" card sm_count SMs 0 0 "$pf: sm_count"
row "compute capability" card cc "" 0 0 "$pf: compute_capability"

# Memory: a context, 64 allocations of 1 MiB, cuMemGetInfo, the VMM granularity.
both mem "$probe" memory
row "memory per context (NVML, per process)" mem ctx_mib MiB 16 0.05 "$pf: context_mib"
row "device memory per 1 MiB cuMemAlloc (64 of them)" mem alloc_mib_per_1mib MiB 0.25 0 \
	"fakegpu/src/cuda_mem.c: 2 MiB granules (no profile key)"
row "cuMemGetInfo total" mem meminfo_total_mib MiB 0 0.01 "$pf: memory_mib (fakegpu keeps no driver reserve: docs/fakegpu.md)"
row "VMM granularity, minimum" mem vmm_min_kib KiB 0 0 "fakegpu/src/cuda_vmm.c: 2 MiB (no profile key)"
row "VMM granularity, recommended" mem vmm_recommended_kib KiB 0 0 "fakegpu/src/cuda_vmm.c: 2 MiB (no profile key)"

# Launch latency: an empty kernel's launch call, and a launch with its synchronisation.
both launch "$probe" launch --n 2000
row "empty kernel: launch and synchronise" launch roundtrip_us µs 5 0.5 "$pf: launch_ns (and fakegpu's wake-up from cuCtxSynchronize)"
row "empty kernel: the launch call alone" launch launch_us µs 3 1 "fakegpu/src/cuda_launch.c: the host's cost of a launch (not a profile key)"

# NVML's per-process samples while two processes keep the GPU busy: each one's sample period,
# and in how many 1 s windows both had a sample (an H200 attributed the device to one at a time).
samples() { # RUNNER...: two loads and the sampler beside them; prints the sampler's line with the loads' pids
	local a b out
	"$@" "$probe" load --seconds "$(add "$wsecs" 1)" >/dev/null 2>&1 &
	a=$!
	"$@" "$probe" load --seconds "$(add "$wsecs" 1)" --kernel-us 10000 >/dev/null 2>&1 &
	b=$!
	sleep 0.5
	out=$("$@" "$probe" samples --seconds "$wsecs" 2>&1 | tail -n 1)
	wait $a $b
	local pa pb
	pa=$(grep -o "{\"pid\":$a,[^}]*}" <<<"$out") pb=$(grep -o "{\"pid\":$b,[^}]*}" <<<"$out")
	echo "$out" >&2
	awk -v a="$(json_num period_ms "$pa")" -v b="$(json_num period_ms "$pb")" -v w="$(json_num windows "$out")" \
		-v s="$(json_num windows_shared "$out")" 'BEGIN {
			p = (a != "" && b != "") ? (a + b) / 2 : (a != "" ? a : b)
			printf "{\"period_ms\":%s,\"shared\":%s}\n", (p == "" ? "null" : p), (w > 0 ? s / w : "null") }'
}
card_samples=$(samples env) fake_samples=$(samples env "${fake_env[@]}")
echo "card samples: $card_samples" && echo "fake samples: $fake_samples"
row "NVML per-process sample period, two busy processes" samples period_ms ms 50 0.4 "$pf: nvml_samples (FAKEGPU_NVML_SAMPLES)"
row "NVML attribution: share of 1 s windows sampling both processes" samples shared "" 0.25 0 \
	"$pf: nvml_samples; fakegpu/src/nvml_process.c (the card's one-process-at-a-time attribution is not modelled)"

# The time slice between processes (as the timeslice section measures it).
lp=$BUILD/bin/hamicore-launchprobe
slice() { # RUNNER...
	local alone beside f
	steady() { sed -n 's/.*"windows":\[\([^]]*\)\].*/\1/p' <<<"$1" | awk -F, '{ s = 0; for (i = 2; i <= NF; i++) s += $i; printf "%.5f", (NF > 1 ? s / (NF - 1) : $1) }'; }
	alone=$("$@" "$lp" --seconds "$wsecs" --workload burst --burst 1 --kernel-us 200 2>&1)
	"$@" "$lp" --seconds "$(add "$wsecs" 1)" --kernel-us 10000 >/dev/null 2>&1 &
	f=$!
	sleep 0.5
	beside=$("$@" "$lp" --seconds "$wsecs" --workload burst --burst 1 --kernel-us 200 2>&1)
	wait $f
	awk -v a="$(steady "$alone")" -v b="$(steady "$beside")" 'BEGIN { if (a > 0 && b > 0) printf "{\"slice_us\":%.0f}\n", 200 / b - 200 / a; else print "{}" }'
}
card_slice=$(slice env) fake_slice=$(slice env "${fake_env[@]}")
echo "card slice: $card_slice" && echo "fake slice: $fake_slice"
row "time slice between processes" slice slice_us µs 300 0.35 "$pf: timeslice_us (FAKEGPU_TIMESLICE_US)"

# The SM clock at full load and at about 30 % of the time busy. On the card with PyTorch's GEMMs
# when it has torch (they meet the power cap that fakegpu's power_boost models), else spin kernels.
clock() { # DUTY card|fake RUNNER...: the SM clock while a load keeps the GPU busy DUTY of the time
	local duty=$1 pid warm=0.5
	shift
	if [ "$1" = card ] && have_torch; then
		warm=6 # PyTorch's import and CUDA start before its GEMMs load the GPU
		"$PY" "$ROOT/harness/gpu/torch_compute.py" run --mode eager --seconds "$(add "$secs" 8)" --duty "$duty" >/dev/null 2>&1 &
	else
		"${@:2}" "$probe" load --seconds "$(add "$secs" 1)" --duty "$duty" >/dev/null 2>&1 &
	fi
	pid=$!
	"${@:2}" "$probe" clocks --seconds "$(add "$secs" "$warm")" --skip "$warm" 2>&1 | tail -n 1
	wait $pid
}
load_kind="spin kernels"
have_torch && load_kind="PyTorch GEMMs on the card, spin kernels on fakegpu"
card_full=$(clock 1 card env) fake_full=$(clock 1 fake env "${fake_env[@]}")
card_part=$(clock 0.3 card env) fake_part=$(clock 0.3 fake env "${fake_env[@]}")
echo "card clocks: $card_full / $card_part" && echo "fake clocks: $fake_full / $fake_part"
row "SM clock at full load" full sm_mhz MHz 0 0.1 "$pf: sm_clock_mhz (fakegpu's full-load SM clock)" "$load_kind"
row "SM clock at about 30 % load" part sm_mhz MHz 0 0.1 "$pf: power_boost (FAKEGPU_POWER_BOOST)" "$load_kind"
speed() { awk -v f="$(json_num sm_mhz "$1")" -v p="$(json_num sm_mhz "$2")" 'BEGIN { if (f > 0 && p > 0) printf "{\"speed\":%.3f}\n", p / f; else print "{}" }'; }
card_speed=$(speed "$card_full" "$card_part") fake_speed=$(speed "$fake_full" "$fake_part")
row "SM clock at 30 % load over full load" speed speed "" 0.08 0 "$pf: power_boost (FAKEGPU_POWER_BOOST)" "$load_kind"

source "$ROOT/harness/gpu/fidelity-sched.sh"
done_section
