#!/usr/bin/env bash
# section: 04 legacy — the HAMi-core v2.10 profile in a login session: 4096 MiB granted over a 3000 MiB limit (the upstream bug, reproduced) (about 5 s)
source "$ROOT/harness/gpu/lib.sh"
need "$LEGACY" "libvgpu-hami-v2.10.so"
need "$REAL/cudaprobe" "cudaprobe (real driver)"
is_root || skip_section "$ROOT_WHY"
pod_limits
check "legacy login cudaprobe 4096" granted "$(in_container "$LEGACY" "$REAL/cudaprobe" --mib 4096 2>&1)"
if [ -x "$REAL/cudart_probe" ]; then
	check "legacy login cudart cudaMalloc 4096" granted "$(in_container "$LEGACY" "$REAL/cudart_probe" alloc 4096 2>&1)"
else
	skip "legacy login cudart cudaMalloc 4096" "no CUDA toolkit (nvcc) here to build harness/gpu/cudart_probe.cu"
fi
done_section
