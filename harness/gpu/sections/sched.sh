#!/usr/bin/env bash
# section: 11 sched — the node scheduler (vgpu-scheduler) on this card: PyTorch pods sharing one GPU (two, three and eight pods, started together and staggered; GEMMs, a sync after every iteration, CUDA-graph replay, a memory-bound copy, a training step; force and default), each pod's completed steps per second over its workload's rate alone (references interleaved), every 10 s window after 2 s within its limit ± 0.02; the GPU's time lost between slices; plots each pod's share per second (about 3 min at SCHED_SECONDS=12; needs torch)
#
# The cases run through harness/gpu/sched_cases.sh (pods made as the device plugin makes them,
# their steps stamped by the GPU's own timer, vgpu-scheduler's trace beside them) and are judged by
# harness/gpu/sched_analyze.py (docs/benchmarks.md, "Compute shares on every card").
#
# What this section writes (the contract with the report and with the fidelity section, which
# runs the same cases on fakegpu; docs/gpu-report.md, "The sched section"):
#   records/sched.jsonl   per case and pod: "CASE: pod P (MODE N %) followed the scheduler"
#                         (pass/fail), "CASE: pod P (MODE N %) share, worst 10 s window" (figure,
#                         lo/hi = limit ± 0.02); per case "CASE: work of the pods together against
#                         their limits" (the sum of their shares, within 0.03 of the sum of limits
#                         while every pod is busy), the GPU's busy fraction and its idle time between
#                         slices by the stamps (info)
#   series/sched-CASE.csv each pod's share per 1 s window, its limit as a reference line
#   sched/cases.tsv       one line per pod: case, pod name, limit %, policy, start s, worst 10 s
#                         window, mean share after 2 s (tab-separated): what fidelity mirrors
#   sched/raw.tgz         every case's files (traces, stamps, nvidia-smi), for sched_analyze.py
# SCHED_CASES replaces the cases (sched_cases.sh's syntax: NAME=MODE@LIMIT[/POLICY][+DELAY][xN],...;
# a case whose pods are all @0 is a reference), SCHED_REPS repeats the judged ones (default 1; a
# release check runs 3).
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
have_torch || skip_section "$TORCH_WHY"
is_root || skip_section "$ROOT_WHY"
[ -x "$BIN/vgpu-scheduler" ] && [ -x "$LB" ] || skip_section "no $BIN/vgpu-scheduler or limitbed: an incomplete bundle (make gpu-bundle)"
command -v nvidia-smi >/dev/null || skip_section "no nvidia-smi on PATH (the GPU's UUID and clocks)"
sched_s=${SCHED_SECONDS:-12}
reps=${SCHED_REPS:-1}
refs="refgemm=gemm@0 refsync=sync@0 refgraph=graph@0 refmembw=membw@0 reftrain=train@0"
judged="pair=gemm@30,gemm@50 trio=gemm@20,sync@30,graph@40 late=gemm@30,graph@50+4 eight=gemm@10,sync@10,graph@10,membw@10,train@10,gemm@10,sync@10,graph@10 dflt=gemm@30/default,gemm@50/default"
cases=${SCHED_CASES:-}
if [ -z "$cases" ]; then
	cases=$refs
	for ((r = 1; r <= reps; r++)); do
		for c in $judged; do cases+=" ${c%%=*}$([ "$reps" -gt 1 ] && echo "-r$r")=${c#*=}"; done
	done
	cases+=" refgemm2=gemm@0" # the card warms: a reference at each end
fi
out=$WORK/sched-cases
mkdir -p "$RUN/sched"
# shellcheck disable=SC2086
PY=$PY BIN=$BIN LIB=$LIB "$ROOT/harness/gpu/sched_cases.sh" "$out" "$sched_s" $cases ||
	rec "cases" fail --note "sched_cases.sh failed: see logs/sched.log"
tar czf "$RUN/sched/raw.tgz" -C "$WORK" sched-cases 2>/dev/null
"$PY" "$ROOT/harness/gpu/sched_analyze.py" "$out" --tsv >"$WORK/sched.tsv" 2>"$WORK/sched-analyze.err" ||
	rec "analysis" fail --note "sched_analyze.py: $(tail -c 300 "$WORK/sched-analyze.err")"
"$PY" "$ROOT/harness/gpu/sched_analyze.py" "$out" # the figures in the log

declare -A made
while IFS=$'\t' read -r kind c a b d e f g h rest; do
	case $kind in
	pod)
		# c=case a=pod b=mode d=limit e=policy f=delay g=worst h=mean rest=1 s ratios
		name="$c: pod $a ($b $d %${e/force/})"
		check "$name followed the scheduler" "launches follow the node scheduler" "$(cat "$out/$c/$a.err" 2>/dev/null)"
		if [ "$g" = - ]; then
			rec "$name share, worst 10 s window" fail --note "no result: $rest"
			continue
		fi
		id=$SECTION-${c//+/-}
		if [ -z "${made[$id]:-}" ]; then
			series "$id" "sched $c: each pod's share of its workload's unlimited rate, per second" seconds share
			made[$id]=1
		fi
		i=0
		for x in $rest; do point "$id" "$i" "$a $b $d %" "$x"; i=$((i + 1)); done
		lo=$(awk -v l="$d" 'BEGIN { print l / 100 - 0.02 }') hi=$(awk -v l="$d" 'BEGIN { print l / 100 + 0.02 }')
		range_check "$name share, worst 10 s window" "$g" share "$lo" "$hi" --noise 0.02 --got "1 s: ${rest:0:200}"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$a" "$d" "$e" "$f" "$g" "$h" >>"$RUN/sched/cases.tsv"
		;;
	case)
		# c=case a=gpu busy b=idle between slices d=sum of limits e=sum of mean shares f=slices
		[ "$a" != - ] && rec "$c: the GPU busy by its own timer" info --figure "$a" --unit share
		[ "$b" != - ] && rec "$c: the GPU idle between slices" info --figure "$b" --unit share --note "$f slices"
		if [ "$e" != - ] && [[ $c != late* ]]; then
			range_check "$c: work of the pods together against their limits" "$e" share \
				"$(awk -v s="$d" 'BEGIN { print s - 0.03 }')" "$(awk -v s="$d" 'BEGIN { print s + 0.03 }')" --noise 0.02 \
				--note "limits sum to $d: the GPU's time lost between slices shows here"
		fi
		;;
	esac
done <"$WORK/sched.tsv"
done_section
