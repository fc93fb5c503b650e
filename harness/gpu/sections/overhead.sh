#!/usr/bin/env bash
# section: 05 overhead — what the library adds: native and library runs interleaved (5 pairs), medians of 2000 cudaMalloc+cudaFree (1 MiB), empty launches, and init (cudaFree(0)); the driver API's launch when there is no toolkit (about 30 s)
# Interleaved, so that a drift of the machine (clocks, other tenants) hits both sides alike. Each
# figure is the library's median minus the native one, over the pairs; the page compares it with
# the last night's (noise: half its bound).
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
pod_limits
pairs=${OVERHEAD_PAIRS:-5}
: >"$WORK/native" && : >"$WORK/library"
if [ -x "$REAL/cudart_probe" ]; then
	probe=("$REAL/cudart_probe" bench 2000)
	keys="alloc_free_1mib_us launch_us init_us"
else
	need "$REAL/gpuprobe" "gpuprobe (real driver)"
	probe=("$REAL/gpuprobe" launch --n 2000)
	keys="launch_us"
	skip "alloc+free and init overhead" "no CUDA toolkit (nvcc) here to build harness/gpu/cudart_probe.cu: only the driver API's launch is measured"
fi
for _ in $(seq "$pairs"); do
	n=$("${probe[@]}" 2>&1)
	l=$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "${probe[@]}" 2>&1)
	echo "native  $n"
	echo "library $l"
	echo "$n" >>"$WORK/native"
	echo "$l" >>"$WORK/library"
done
for k in $keys; do
	nat=$(while read -r line; do json_num "$k" "$line"; done <"$WORK/native" | median)
	lib=$(while read -r line; do json_num "$k" "$line"; done <"$WORK/library" | median)
	case $k in
	alloc_free_1mib_us) what="cudaMalloc+cudaFree 1 MiB" unit=µs bound=20 noise=10 scale=1 ;;
	launch_us) what="empty kernel launch" unit=µs bound=1.5 noise=0.75 scale=1 ;;
	init_us) what="init (cuInit + primary context)" unit=ms bound=50 noise=25 scale=1000 ;;
	esac
	if [ -z "$nat" ] || [ -z "$lib" ]; then
		rec "$what: library minus native" fail --note "the probe gave no $k (its output is in the log)"
		continue
	fi
	rec "$what: native median" info --figure "$(awk -v v="$nat" -v s=$scale 'BEGIN { printf "%.3f", v / s }')" --unit "$unit"
	range_check "$what: library minus native" "$(awk -v a="$lib" -v b="$nat" -v s=$scale 'BEGIN { printf "%.3f", (a - b) / s }')" \
		"$unit" "" "$bound" --noise "$noise" --worse up --note "medians of $pairs interleaved runs each"
done
done_section
