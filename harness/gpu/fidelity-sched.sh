# fidelity-sched.sh: the fidelity section's scheduler rows (sourced by sections/fidelity.sh): every
# case the sched section measured on the card in this run (RUN/sched/cases.tsv: case, pod, limit,
# policy, start, worst 10 s window, mean share after 2 s) run again on fakegpu with the card's
# profile under the same node scheduler (limitbed bench compute --scheduler, the shape-mix
# workload), each pod's mean share after 2 s side by side.
# shellcheck shell=bash
cases=$RUN/sched/cases.tsv
if [ ! -s "$cases" ]; then
	skip "sched cases" "the sched section did not measure any case in this run (./gpu-check sched fidelity; it needs torch and root)"
elif ! is_root; then
	skip "sched cases" "$ROOT_WHY"
else
	fsecs=${FIDELITY_SCHED_SECONDS:-12}
	for name in $(cut -f1 "$cases" | awk '!seen[$0]++'); do
		specs=()
		while IFS=$'\t' read -r c pod lim pol start _ _; do
			[ "$c" = "$name" ] && specs+=(--container "name=$pod,limit=$lim,policy=$pol,start=${start}s,workload=mix")
		done <"$cases"
		out=$("$LB" bench compute --scheduler --scheduler-binary "$BIN/vgpu-scheduler" --profile "$PROFILE" --root "$ROOT" \
			--build "$BUILD/fake" --seconds "$fsecs" --json "${specs[@]}" 2>"$WORK/fidelity-sched.err")
		rc=$?
		if [ $rc != 0 ] && [ $rc != 1 ]; then
			while IFS=$'\t' read -r c pod lim _; do
				[ "$c" = "$name" ] && rec "sched $c: pod $lim % share" fail --note "the fakegpu run failed (exit $rc): $(tail -c 300 "$WORK/fidelity-sched.err")"
			done <"$cases"
			continue
		fi
		# Each pod's mean share after its first 2 s on fakegpu, by its name.
		fake_shares=$("$PY" -c 'import json, sys
r = json.load(sys.stdin)
for c in r["containers"]:
    w = [x for x in c["windows"][2:] if x >= 0]
    print(c["name"], "%.4f" % (sum(w) / len(w)) if w else "")' <<<"$out" 2>&1)
		echo "fakegpu $name: $(tr '\n' ' ' <<<"$fake_shares")"
		while IFS=$'\t' read -r c pod lim _ _ _ mean; do
			[ "$c" = "$name" ] || continue
			rec "sched $c: pod $lim % share" auto --figure "$mean" --fake "$(awk -v p="$pod" '$1 == p { print $2 }' <<<"$fake_shares")" \
				--unit share --tol 0.03 --key "$PROFILE.profile: power_boost, power_work_pct, nvml_samples (the scheduler's inputs on fakegpu: docs/fakegpu.md)" \
				--noise 0.03 --note "mean of the 1 s windows after 2 s; the card ran PyTorch GEMMs, fakegpu the shape mix"
		done <"$cases"
	done
fi
