#!/usr/bin/env bash
# section: 08 judge — the memory judge's workload (memload) on the real driver: one sequence per class of escape (docs/attacks.md), in an env and a login session, judged after every step by nvidia-smi's per-process figures against 3000/1000 MiB; plots each process's memory (about 1 min)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
need "$REAL/memload" "memload (real driver)"
modes="env login"
is_root || { modes=env; skip "login" "$ROOT_WHY"; }
command -v nvidia-smi >/dev/null || [ -n "${GPU_CHECK_JUDGE_TRUTH:-}" ] ||
	skip_section "no nvidia-smi on PATH: the judge's truth is its per-process figures (--query-compute-apps)"
for mode in $modes; do
	series "$SECTION-$mode" "judge ($mode session): each process's memory by the driver's record, and the pod's, against its limit" \
		"checkpoint (after each class of steps)" MiB "pod limit 3000 MiB=3000"
	JUDGE_MEMLOAD="$REAL/memload" JUDGE_LIB="$LIB" JUDGE_RECORD="$GR record --run $RUN --section $SECTION" \
		JUDGE_SERIES="$RUN/series/$SECTION-$mode.csv" JUDGE_TRUTH="${GPU_CHECK_JUDGE_TRUTH:-}" \
		JUDGE_ENV="${GPU_CHECK_NS_ENV:-}" JUDGE_NS_ARGS="${GPU_CHECK_NS_ARGS:-}" \
		"$ROOT/harness/memjudge/real.sh" "$mode" || fail=1
done
done_section
