#!/usr/bin/env bash
# section: 01 memory — a 3000 MiB limit through the environment and through a login session (env -i, /etc/ld.so.preload + /overrideEnv): linked symbols, dlsym, cuGetProcAddress, the CUDA runtime, nvidia-smi, the pod's usage.cache (about 30 s)
#   env     preload + CUDA_DEVICE_MEMORY_LIMIT_0=3000m     4096 refused, 2048 granted, total 3000
#   login   env -i, /etc/ld.so.preload + /overrideEnv      4096 refused (the fix)
# The login cases run in hamicore/test/privatens (a private mount namespace chrooted into an
# overlay of /), so the host's / and /etc are never written.
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
need "$REAL/cudaprobe" "cudaprobe (real driver)"
bin=$REAL
pod_limits
cudart=$REAL/cudart_probe
smi=$(command -v nvidia-smi)

check "native cudaprobe 4096" granted "$("$bin/cudaprobe" --mib 4096 2>&1)"
for api in symbols dlsym procaddress; do
	check "env $api 4096" refused "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$bin/cudaprobe" --api=$api --mib 4096 2>&1)"
	check "env $api 2048" granted "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$bin/cudaprobe" --api=$api --mib 2048 2>&1)"
done
check "env cudaprobe total" '"total_mib":3000' "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$bin/cudaprobe" --mib 1 2>&1)"
if [ -x "$cudart" ]; then
	check "env cudart cudaMalloc 4096" refused "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$cudart" alloc 4096 2>&1)"
	check "env cudart cudaMalloc 2048" granted "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$cudart" alloc 2048 2>&1)"
else
	skip "env cudart cudaMalloc" "no CUDA toolkit (nvcc) here to build harness/gpu/cudart_probe.cu: the CUDA runtime's view is not checked"
fi
if [ -n "$smi" ]; then
	check "env nvidia-smi total" '3000MiB' "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$smi" 2>&1)"
else
	skip "env nvidia-smi total" "no nvidia-smi on PATH"
fi
check "env gpuinfo total" '3000' "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$bin/gpuinfo" 2>&1)"

if is_root; then
	for api in symbols dlsym procaddress; do
		check "login $api 4096" refused "$(in_container "$LIB" "$bin/cudaprobe" --api=$api --mib 4096 2>&1)"
	done
	if [ -x "$cudart" ]; then
		check "login cudart cudaMalloc 4096" refused "$(in_container "$LIB" "$cudart" alloc 4096 2>&1)"
	fi
	[ -n "$smi" ] && check "login nvidia-smi total" '3000MiB' "$(in_container "$LIB" "$smi" 2>&1)"
	check "login joined the pod's usage.cache" '"pid"' "$("$BIN/regiondump" "$WORK/pod/usage.cache" 2>&1)"
else
	skip "login session" "$ROOT_WHY"
fi

# The library is quiet at its default level: no line on stderr for an ordinary process.
lines=$(env LD_PRELOAD="$LIB" "${envlimit[@]}" "$bin/cudaprobe" --mib 16 2>&1 >/dev/null | wc -l)
range_check "lines logged by the library at the default level, one process" "$lines" lines 0 0
done_section
