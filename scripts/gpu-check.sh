#!/usr/bin/env bash
# The real-GPU check of libvgpu.so: run as root on a machine with an NVIDIA GPU, its driver and a
# CUDA toolkit (the nightly GPU job; release engineers). The fake driver must not be the only judge.
#
# Builds the library (current and HAMi-core v2.10 profiles), cudaprobe/gpuinfo against the real
# driver and a CUDA runtime probe with nvcc, then checks a 3000 MiB limit:
#   env     preload + CUDA_DEVICE_MEMORY_LIMIT_0=3000m     4096 refused, 2048 granted, total 3000
#   login   env -i, /etc/ld.so.preload + /overrideEnv      4096 refused (the fix)
#   legacy  the same with the v2.10 profile                4096 granted (the upstream bug)
# through linked symbols, dlsym, cuGetProcAddress, the CUDA runtime, and nvidia-smi / NVML.
# The login cases run in hamicore/test/privatens (a private mount namespace chrooted into an
# overlay of /), so the host's / and /etc are never written. Then overhead figures, native vs
# library; then the compute limit: limitbed bench compute --real (uniform, shape mix, graph replay
# at 30/60 % force, default alone) and, when torch is importable, PyTorch eager and CUDA-graph
# GEMMs at 30/60 %. One line per check; exits 1 on any mismatch.
#
#   scripts/gpu-check.sh [SECTION...]   default: every section, in this order:
#     memory      limits through the environment and through a login session, nvidia-smi, regiondump
#     paths       hamicore/test/paths natively, in an env session and in a login session
#     frameworks  PyTorch's VMM, graph and stream-ordered allocators (where torch is installed)
#     legacy      the HAMi-core v2.10 profile (the upstream login-session escape)
#     overhead    native and library runs interleaved: alloc+free pairs, empty launches, init
#     compute     the spin kernel, then limitbed bench compute --real
#     torch       PyTorch eager and CUDA-graph GEMMs at 30/60 % force
#     judge       the memory judge's workload (memload) on the real driver, one sequence per class
#                 of escape, exec and login sessions, judged by nvidia-smi's per-process figures
#                 (harness/memjudge/real.sh)
#     drivertruth the node monitor's driver-truth accounting: the driver's per-process figures
#                 against its attribution, an honest process and a bypass (limitbed bench drivertruth)
#     timeslice   the GPU's time slice between processes, as fakegpu models it (no library)
#     sched       two PyTorch pods on one GPU under vgpu-scheduler: 30 % + 50 % and 10 % + 90 % force
# A nightly job runs them all; a machine with a per-command time limit runs them in parts.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/build-gpu}
[ "$(id -u)" -eq 0 ] || { echo "gpu-check: needs root (unshare -m, mount)" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: not a GPU machine" >&2; exit 2; }
all_sections="memory paths frameworks legacy overhead compute torch judge drivertruth timeslice sched"
sections=${*:-$all_sections}
for sec in $sections; do
	grep -qw -- "$sec" <<<"$all_sections" || { echo "gpu-check: unknown section \"$sec\" (sections: $all_sections)" >&2; exit 2; }
done
want() { grep -qw -- "$1" <<<"$sections"; }
bench_s=${BENCH_SECONDS:-15} # compute and torch runs
set -e
make -s -C hamicore OUT="$out" >/dev/null
# regiondump is Go; a GPU machine without Go gets it built elsewhere (static) as $out/bin/regiondump.
if command -v go >/dev/null 2>&1; then
	CGO_ENABLED=0 go build -trimpath -o "$out/bin/regiondump" ./plugin/cmd/regiondump
elif [ ! -x "$out/bin/regiondump" ]; then
	echo "gpu-check: no Go here to build regiondump: build it elsewhere with" >&2
	echo "  CGO_ENABLED=0 go build -trimpath -o $out/bin/regiondump ./plugin/cmd/regiondump" >&2
	exit 2
fi
make -s -C fakegpu tools-real OUT="$out" >/dev/null
# The path programs against the real driver: linked by soname, no fakegpu anywhere (PATH_LINK=).
make -s -C hamicore paths OUT="$out" PATH_LINK= >/dev/null
mkdir -p "$out/bin-real"
nvcc -O2 -o "$out/bin-real/cudart_probe" harness/gpu/cudart_probe.cu
set +e
lib=$out/lib/libvgpu.so
legacy=$out/lib/libvgpu-hami-v2.10.so
bin=$out/bin-real
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "CUDA toolkit: $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

check() { # NAME WANT OUTPUT — WANT: refused | granted | a substring the output must contain
	local name=$1 want=$2 got=$3 ok=0
	case $want in
	refused) grep -q '"error":"[A-Za-z_]*\(OUT_OF_MEMORY\|MemoryAllocation\)' <<<"$got" && ok=1 ;;
	granted) grep -q '"error":null' <<<"$got" && ok=1 ;;
	*) grep -q -- "$want" <<<"$got" && ok=1 ;;
	esac
	[ $ok = 1 ] || fail=1
	printf '%-4s %-46s want %-22s %s\n' "$([ $ok = 1 ] && echo PASS || echo FAIL)" "$name" "$want" \
		"$(tr '\n' ' ' <<<"$got" | cut -c1-220)"
}

# The plugin's file for one 3000 MiB device, with the pod's cache directory.
cache=$work/pod
mkdir -p "$cache"
# The second GPU's 1000 MiB: path-order (2 GPUs) judges limits by physical GPU.
printf 'CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_LIMIT_1=1000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s/usage.cache\nHAMI_LIMITS_FORMAT=1\n' \
	"$cache" >"$work/limits"
envlimit=(CUDA_DEVICE_MEMORY_LIMIT_0=3000m CUDA_DEVICE_MEMORY_LIMIT_1=1000m "CUDA_DEVICE_MEMORY_SHARED_CACHE=$cache/usage.cache")
# in_container LIB CMD...: no environment at all, the library only through /etc/ld.so.preload and
# the limits only through /overrideEnv — a login session in a HAMi container.
in_container() {
	local l=$1
	shift
	hamicore/test/privatens --preload "$l" --override-env "$work/limits" --private-tmp \
		--bind "$cache" --bind /usr/local/nvidia --bind "$root" -- /usr/bin/env -i "$@"
}

if want memory; then
echo "== native (no library)"
check "native cudaprobe 4096" granted "$("$bin/cudaprobe" --mib 4096 2>&1)"

echo "== env: preload + CUDA_DEVICE_MEMORY_LIMIT_0=3000m"
for api in symbols dlsym procaddress; do
	check "env $api 4096" refused "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudaprobe" --api=$api --mib 4096 2>&1)"
	check "env $api 2048" granted "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudaprobe" --api=$api --mib 2048 2>&1)"
done
check "env cudaprobe total" '"total_mib":3000' "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudaprobe" --mib 1 2>&1)"
check "env cudart cudaMalloc 4096" refused "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudart_probe" alloc 4096 2>&1)"
check "env cudart cudaMalloc 2048" granted "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudart_probe" alloc 2048 2>&1)"
check "env nvidia-smi total" '3000MiB' "$(env LD_PRELOAD="$lib" "${envlimit[@]}" nvidia-smi 2>&1)"
check "env gpuinfo total" '3000' "$(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/gpuinfo" 2>&1)"

echo "== login: env -i, /etc/ld.so.preload + /overrideEnv (current library)"
for api in symbols dlsym procaddress; do
	check "login $api 4096" refused "$(in_container "$lib" "$bin/cudaprobe" --api=$api --mib 4096 2>&1)"
done
check "login cudart cudaMalloc 4096" refused "$(in_container "$lib" "$bin/cudart_probe" alloc 4096 2>&1)"
check "login nvidia-smi total" '3000MiB' "$(in_container "$lib" /usr/bin/nvidia-smi 2>&1)"
check "login joined the pod's usage.cache" '"pid"' "$("$out/bin/regiondump" "$cache/usage.cache" 2>&1)"
fi

if want paths; then
echo "== allocation paths (hamicore/test/paths): natively, env session, login session"
# Each program prints "PASS <name> (<mode>)"; 77 = cannot run here (device order needs 2 GPUs).
paths() { # MODE RUNNER...
	local mode=$1 p got rc
	shift
	for p in vmm ctx pool graph array order stress fork dlsym fds; do
		local pre=()
		[ "$p" = order ] && pre=(CUDA_VISIBLE_DEVICES=1,0)
		# A real cuMemAlloc/cuMemFree pair costs ~75 us: 8 threads x 100k pairs would take minutes.
		[ "$p" = stress ] && pre=(PATH_ITERS="${PATH_STRESS_ITERS:-5000}")
		if [ "$p" = dlsym ]; then
			[ "$mode" != env ] && pre+=(LD_PRELOAD="$out/lib/path-dlsym-shim.so") # login: after ld.so.preload
			[ "$mode" = env ] && pre+=(LD_PRELOAD="$lib $out/lib/path-dlsym-shim.so")
		fi
		local expect=limited
		[ "$mode" = native ] && expect=native
		got=$("$@" "${pre[@]}" PATH_EXPECT=$expect "$out/bin/path-$p" 2>&1)
		rc=$?
		if [ $rc = 77 ]; then
			printf 'SKIP %-46s %s\n' "$mode path-$p" "$(tail -1 <<<"$got")"
			continue
		fi
		check "$mode path-$p" "PASS " "$(grep -E '^(FAIL|PASS) ' <<<"$got" | tr '\n' ' ')"
		grep '^info ' <<<"$got" | sed "s/^/     $mode path-$p: /" # the driver's figures, for fakegpu
	done
}
paths native env
paths env env LD_PRELOAD="$lib" "${envlimit[@]}"
paths login in_container "$lib" PATH_LOGIN=1
fi

if want frameworks; then
echo "== real frameworks (only where PyTorch is installed)"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	torch_vmm='import torch
try:
    x = [torch.empty(512 << 20, dtype=torch.uint8, device="cuda") for _ in range(16)]
    print("granted", len(x))
except torch.cuda.OutOfMemoryError:
    print("refused OutOfMemoryError")'
	check "env torch expandable segments 8 GiB" refused "$(env LD_PRELOAD="$lib" "${envlimit[@]}" \
		PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 -c "$torch_vmm" 2>&1 | sed 's/refused OutOfMemoryError/"error":"OUT_OF_MEMORY"/')"
	torch_graph='import os, torch
s = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g, stream=s):
        x = torch.empty(int(os.environ.get("GRAPH_MIB", "4096")) << 20, dtype=torch.uint8, device="cuda")
    g.replay()
    print("granted")
except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
    print("refused", type(e).__name__)'
	check "env torch 4 GiB inside a captured graph" refused "$(env LD_PRELOAD="$lib" "${envlimit[@]}" \
		python3 -c "$torch_graph" 2>&1 | sed 's/^refused .*/"error":"OUT_OF_MEMORY"/')"
	# The stream-ordered allocator: inside capture the allocation is a graph memory node.
	got=$(env LD_PRELOAD="$lib" "${envlimit[@]}" PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
		python3 -c "$torch_graph" 2>&1; echo "exit $?")
	check "env torch cudaMallocAsync 4 GiB inside a captured graph" refused "$(sed 's/^refused .*/"error":"OUT_OF_MEMORY"/' <<<"$got")"
	grep -q '^refused' <<<"$got" || tail -n 25 <<<"$got" | sed 's/^/     /'
	# What the same program does natively when the graph's memory is not there: ask for more than
	# the device has (the driver's own out-of-memory at the graph's launch).
	dev_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
	got=$(env GRAPH_MIB=$((dev_mib + 16384)) PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
		python3 -c "$torch_graph" 2>&1; echo "exit $?")
	echo "info native torch cudaMallocAsync $((dev_mib + 16384)) MiB inside a captured graph (more than the device):"
	tail -n 25 <<<"$got" | sed 's/^/     /'
else
	echo "SKIP real frameworks: python3 -c 'import torch' with CUDA is not available"
fi
fi

if want legacy; then
echo "== legacy: the same with the HAMi-core v2.10 profile (the upstream bug)"
check "legacy login cudaprobe 4096" granted "$(in_container "$legacy" "$bin/cudaprobe" --mib 4096 2>&1)"
check "legacy login cudart cudaMalloc 4096" granted "$(in_container "$legacy" "$bin/cudart_probe" alloc 4096 2>&1)"

fi

if want overhead; then
# Interleaved, so that a drift of the machine (clocks, other tenants) hits both sides alike.
echo "== overhead: medians of 2000 cudaMalloc+cudaFree (1 MiB) and empty launches; init = cudaFree(0); native and library interleaved"
for i in 1 2 3 4 5; do
	echo "native  $("$bin/cudart_probe" bench 2000 2>&1)"
	echo "library $(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudart_probe" bench 2000 2>&1)"
done
fi

# Without Go here, a limitbed binary built elsewhere as $out/bin/limitbed runs the benchmarks.
limitbed_cli=()
if command -v go >/dev/null; then
	limitbed_cli=(go run ./harness/cmd/limitbed)
elif [ -x "$out/bin/limitbed" ]; then
	limitbed_cli=("$out/bin/limitbed")
fi

if want compute; then
echo "== compute limit: CUDA_DEVICE_SM_LIMIT=30, GPU_CORE_UTILIZATION_POLICY=force; ~1 ms kernels on all SMs"
spin_s=${SPIN_SECONDS:-20}
free_run=$("$bin/cudart_probe" spin "$spin_s" 2>&1)
# A pod of its own: the first process stamps the limits into usage.cache (first writer wins), so
# reusing the memory cases' cache would keep their "no compute limit".
mkdir -p "$work/pod-compute"
lim_run=$(env LD_PRELOAD="$lib" CUDA_DEVICE_MEMORY_LIMIT_0=3000m \
	CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/pod-compute/usage.cache" CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY=force \
	"$bin/cudart_probe" spin "$spin_s" 2>&1)
echo "unlimited: $free_run"
echo "limit 30:  $lim_run"
rate() { sed -n 's/.*"launches_per_s":\([0-9.]*\).*/\1/p' <<<"$1"; }
ratio=$(awk -v a="$(rate "$lim_run")" -v b="$(rate "$free_run")" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }')
# Over the whole run, start-up included: the first 1.5 s run unthrottled (the limiter's full-load
# calibration, docs/hamicore.md) and leave up to ~1 s of 1 ms kernels queued, so 20 s at 30 % come
# to about 0.40; the windows after 2 s are judged below.
check "compute limit 30% achieved ratio, whole run" "within-0.25-0.45" "ratio $ratio $(awk -v r="$ratio" 'BEGIN { print (r >= 0.25 && r <= 0.45) ? "within-0.25-0.45" : "outside-0.25-0.45" }')"

# The compute limit as issue-level figures: every workload of launchprobe (a uniform spin kernel,
# a BLAS-like shape mix, the mix as a replayed graph) unlimited and at 30 and 60 % force, and the
# default policy alone with the node monitor's decision running: every 10 s window after 2 s
# within the limit +- 0.02, default alone >= 0.95 of unlimited.
echo "== compute limit per workload and policy: limitbed bench compute --real (${bench_s} s runs)"
if [ ${#limitbed_cli[@]} -gt 0 ]; then
	bench_out=$("${limitbed_cli[@]}" bench compute --real --build "$out" --seconds "$bench_s" \
		--limits 30,60 --policies force,default --windows 2>&1)
	echo "$bench_out"
	check "bench compute: uniform, mix, graph at 30/60 force, default alone" "every run within bounds" "$bench_out"
else
	echo "SKIP bench compute: no Go toolchain and no $out/bin/limitbed on this machine (go build -o $out/bin/limitbed ./harness/cmd/limitbed elsewhere)"
fi

fi

if want torch; then
# The same with a real BLAS: PyTorch bf16 4096^2 GEMMs, eager and replayed from a CUDA graph.
echo "== compute limit under PyTorch (eager GEMMs, CUDA-graph replay), ${bench_s} s runs"
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	tc=harness/gpu/torch_compute.py
	for mode in eager graph; do
		python3 "$tc" run --mode "$mode" --seconds "$bench_s" >"$work/torch-$mode-free.json" 2>"$work/torch.err" ||
			{ check "torch $mode unlimited run" "torch-run-succeeded" "$(cat "$work/torch.err")"; continue; }
		for lim in 30 60; do
			mkdir -p "$work/pod-torch-$mode-$lim"
			env LD_PRELOAD="$lib" CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/pod-torch-$mode-$lim/usage.cache" \
				CUDA_DEVICE_SM_LIMIT=$lim GPU_CORE_UTILIZATION_POLICY=force \
				python3 "$tc" run --mode "$mode" --seconds "$bench_s" >"$work/torch-$mode-$lim.json" 2>>"$work/torch.err"
			check "torch $mode GEMM force $lim%" "within" \
				"$(python3 "$tc" judge "$work/torch-$mode-free.json" "$work/torch-$mode-$lim.json" --limit $lim 2>&1)"
		done
	done
else
	echo "SKIP PyTorch compute checks: python3 cannot import torch with CUDA here"
fi
fi

if want judge; then
echo "== judge: memload's sequences on the real driver, nvidia-smi's per-process figures as the truth (3000/1000 MiB)"
make -s -C harness/memjudge/memload real OUT="$out" >/dev/null
for mode in env login; do
	JUDGE_MEMLOAD="$out/bin-real/memload" JUDGE_LIB="$lib" harness/memjudge/real.sh "$mode" || fail=1
done
fi

if want drivertruth; then
# The node's driver-truth accounting (plugin/monitor) against the real driver: two containers as
# real cgroups, an honest 1000 MiB process under a 3000 MiB limit and a 4096 MiB bypass (glibc's
# own dlsym) in the tenant, 1000 MiB in the neighbour. Per process the driver's usedGpuMemory, the
# library's count and the monitor's attribution; the tenant over, the bypass the offender, the
# neighbour within; with --kill the bypass alone SIGKILLed.
echo "== driver truth: the driver's per-process figures against the monitor's attribution"
if [ ${#limitbed_cli[@]} -gt 0 ]; then
	for mode in report kill; do
		kill_flag=()
		[ $mode = kill ] && kill_flag=(--kill)
		dt_out=$("${limitbed_cli[@]}" bench drivertruth --real --build "$out" "${kill_flag[@]}" 2>&1)
		echo "$dt_out"
		check "bench drivertruth ($mode)" "matches the driver" "$dt_out"
	done
else
	echo "SKIP bench drivertruth: no Go toolchain and no $out/bin/limitbed on this machine (go build -o $out/bin/limitbed ./harness/cmd/limitbed elsewhere)"
fi
fi

if want timeslice; then
# fakegpu time-slices processes' work: 1024 us slices, round robin, kernels preempted at a slice's
# end (docs/fakegpu.md). The real GPU's: a process that synchronises after every 200 us spin kernel
# waits, beside a process keeping its queue full of 10 ms kernels, for that process's slice before
# each of its kernels (not for the whole queue, as one FIFO would make it). Its iteration time
# beside the flood minus alone is the slice it waited. No library.
echo "== time-slicing between processes: a process synchronising after every 200 us kernel, alone and beside a queue of 10 ms kernels"
probe=$out/bin/hamicore-launchprobe
steady() { sed -n 's/.*"windows":\[\([^]]*\)\].*/\1/p' <<<"$1" | awk -F, '{ s = 0; for (i = 2; i <= NF; i++) s += $i; printf "%.5f", (NF > 1 ? s / (NF - 1) : 0) }'; }
alone=$("$probe" --seconds 5 --workload burst --burst 1 --kernel-us 200 2>&1)
"$probe" --seconds 8 --kernel-us 10000 >"$work/flood.json" 2>&1 &
flood_pid=$!
sleep 1
beside=$("$probe" --seconds 5 --workload burst --burst 1 --kernel-us 200 2>&1)
wait $flood_pid
echo "alone:  $alone"
echo "beside: $beside"
echo "flood:  $(cat "$work/flood.json")"
it_alone=$(awk -v f="$(steady "$alone")" 'BEGIN { printf "%.0f", (f > 0 ? 200 / f : 1e9) }')
it_beside=$(awk -v f="$(steady "$beside")" 'BEGIN { printf "%.0f", (f > 0 ? 200 / f : 1e9) }')
echo "iteration alone ${it_alone} us, beside the flood ${it_beside} us: the GPU's time slice is about $((it_beside - it_alone)) us (fakegpu: 1024)"
check "neighbour waits a slice, not the flood's queue" "time-sliced" \
	"iteration ${it_beside} us $(awk -v b="$it_beside" 'BEGIN { print ((b < 50000) ? "time-sliced" : "queued-behind") }')"
fi

if want sched; then
# The node scheduler (docs/plugin.md, "vgpu-scheduler"): two pods on one GPU, each a PyTorch
# process in a private mount namespace set up as the device plugin sets up a container (its
# limits at /overrideEnv, its cache directory at /usr/local/vgpu, its grant file read-only at
# /usr/local/vgpu/sched.grant), vgpu-scheduler driving the grant files. Judged by completed work:
# each pod's GEMMs per 1 s window (each window ends with a synchronisation) over the same
# workload's rate alone and unlimited, every 10 s window after its first 2 s within its limit +-
# 0.02.
sched_s=${SCHED_SECONDS:-20}
echo "== the node scheduler: two PyTorch pods on one GPU, 30 % + 50 % and 10 % + 90 % force, ${sched_s} s runs"
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "SKIP the node scheduler: python3 cannot import torch with CUDA here"
elif ! command -v go >/dev/null && { [ ! -x "$out/bin/vgpu-scheduler" ] || [ ! -x "$out/bin/limitbed" ]; }; then
	echo "SKIP the node scheduler: no Go toolchain here, and no $out/bin/vgpu-scheduler and $out/bin/limitbed built elsewhere"
else
	if command -v go >/dev/null; then
		go build -o "$out/bin/vgpu-scheduler" ./plugin/cmd/vgpu-scheduler
		go build -o "$out/bin/limitbed" ./harness/cmd/limitbed
	fi
	tc=$root/harness/gpu/torch_compute.py
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
	CUDA_VISIBLE_DEVICES=$uuid python3 "$tc" run --mode eager --seconds "$sched_s" >"$work/sched-free.json" 2>"$work/sched-free.err" ||
		check "sched: unlimited run" "torch-run-succeeded" "$(cat "$work/sched-free.err")"
	for pair in "30 50" "10 90"; do
		read -r l1 l2 <<<"$pair"
		hook=$work/sched-$l1-$l2
		mkdir -p "$hook"
		for lim in $l1 $l2; do
			"$out/bin/limitbed" bench pod --hook "$hook" --gpu "$uuid" --container "name=p$lim,limit=$lim,policy=force" >/dev/null
		done
		# The scheduler charges slices by the SM clock against its full-load figure (docs/plugin.md,
		# "Work, not time"): its metrics say what it read; nvidia-smi samples the clock beside it.
		"$out/bin/vgpu-scheduler" --hook-path="$hook" --metrics-address=127.0.0.1:19395 2>"$hook/scheduler.log" &
		spid=$!
		nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -i 0 -lms 250 >"$hook/clocks.csv" &
		smipid=$!
		pids=()
		for lim in $l1 $l2; do
			key=p${lim}_main
			hamicore/test/privatens --preload "$lib" --override-env "$hook/vgpu/containers/$key.limits" \
				--bind /usr/local/nvidia --bind "$root" --mount "/usr/local/vgpu=$hook/vgpu/containers/$key" \
				--mount-ro "/usr/local/vgpu/sched.grant=$hook/vgpu/sched/$key.grant" -- \
				/usr/bin/env CUDA_VISIBLE_DEVICES="$uuid" LIBCUDA_LOG_LEVEL=3 \
				python3 "$tc" run --mode eager --seconds "$sched_s" >"$hook/$key.json" 2>"$hook/$key.err" &
			pids+=($!)
		done
		wait "${pids[@]}"
		python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:19395/metrics", timeout=5).read().decode())' 2>&1 |
			grep -E '^vgpu_scheduler_(gpu_speed|gpu_sm_clock|gpu_full_load|gpu_calibrations|container_gpu_seconds)' | sed "s/^/scheduler $l1+$l2: /"
		kill -TERM $spid $smipid
		wait $spid
		wait $smipid 2>/dev/null
		awk -F', *' -v p="$l1+$l2" 'NR > 8 && $1 > 0 { c += $1; w += $2; u += $3; n++ }
			END { if (n) printf "clocks %s (after 2 s): SM %.0f MHz, %.0f W, busy %.0f %%, %d samples\n", p, c / n, w / n, u / n, n }' "$hook/clocks.csv"
		for lim in $l1 $l2; do
			key=p${lim}_main
			check "sched $l1+$l2: pod $lim % followed the scheduler" "launches follow the node scheduler" "$(cat "$hook/$key.err")"
			check "sched $l1+$l2: pod $lim % force, eager GEMMs" "within" \
				"$(python3 "$tc" judge "$work/sched-free.json" "$hook/$key.json" --limit "$lim" --tol 0.02 2>&1)"
		done
		echo "scheduler: $(grep -c . "$hook/scheduler.log") log lines; $(tail -1 "$hook/scheduler.log")"
	done
fi
fi

echo "== log lines printed by the library at the default level, one CUDA process: $(env LD_PRELOAD="$lib" "${envlimit[@]}" "$bin/cudart_probe" alloc 16 2>&1 >/dev/null | wc -l)"
[ $fail = 0 ] && echo "gpu-check: all checks passed" || echo "gpu-check: FAILED"
exit $fail
