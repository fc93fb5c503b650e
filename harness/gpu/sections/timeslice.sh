#!/usr/bin/env bash
# section: 10 timeslice — the GPU's time slice between processes (no library): a process synchronising after every 200 µs kernel, alone and beside a process keeping its queue full of 10 ms kernels; its iteration time beside the flood minus alone is the slice it waited (fakegpu models 1024 µs; an H200 showed 2.4 ms) (about 10 s)
source "$ROOT/harness/gpu/lib.sh"
probe=$BUILD/bin/hamicore-launchprobe
need "$probe" hamicore-launchprobe
secs=${TIMESLICE_SECONDS:-5}
# steady: the mean busy fraction of the windows after the first.
steady() { sed -n 's/.*"windows":\[\([^]]*\)\].*/\1/p' <<<"$1" | awk -F, '{ s = 0; for (i = 2; i <= NF; i++) s += $i; printf "%.5f", (NF > 1 ? s / (NF - 1) : $1) }'; }
alone=$("$probe" --seconds "$secs" --workload burst --burst 1 --kernel-us 200 2>&1)
"$probe" --seconds "$(awk -v s="$secs" 'BEGIN { print s + 1.5 }')" --kernel-us 10000 >"$WORK/flood.json" 2>&1 &
flood_pid=$!
sleep 0.5
beside=$("$probe" --seconds "$secs" --workload burst --burst 1 --kernel-us 200 2>&1)
wait $flood_pid
echo "alone:  $alone"
echo "beside: $beside"
echo "flood:  $(cat "$WORK/flood.json")"
it_alone=$(awk -v f="$(steady "$alone")" 'BEGIN { if (f > 0) printf "%.0f", 200 / f }')
it_beside=$(awk -v f="$(steady "$beside")" 'BEGIN { if (f > 0) printf "%.0f", 200 / f }')
rec "iteration alone" info --figure "$it_alone" --unit µs
# Beside a flood the neighbour waits a slice, not the flood's whole queue (up to 1 s of 10 ms kernels).
range_check "iteration beside a flood (waits a slice, not the queue)" "$it_beside" µs "" 50000
slice=$(awk -v a="$it_alone" -v b="$it_beside" 'BEGIN { if (a != "" && b != "") printf "%.0f", b - a }')
rec "time slice between processes" info --figure "$slice" --unit µs --noise "$(awk -v s="${slice:-0}" 'BEGIN { printf "%.0f", (s > 0 ? s : 1000) * 0.3 }')" \
	--note "fakegpu: 1024 µs (timeslice_us); the fidelity section compares the two"
done_section
