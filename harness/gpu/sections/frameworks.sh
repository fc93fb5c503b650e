#!/usr/bin/env bash
# section: 03 frameworks — PyTorch's allocators under a 3000 MiB limit: expandable segments (VMM), 4 GiB inside a captured CUDA graph, the stream-ordered allocator in a graph (about 30 s; needs torch)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
have_torch || skip_section "$TORCH_WHY"
pod_limits
torch_vmm='import torch
try:
    x = [torch.empty(512 << 20, dtype=torch.uint8, device="cuda") for _ in range(16)]
    print("granted", len(x))
except torch.cuda.OutOfMemoryError:
    print("refused OutOfMemoryError")'
check "env torch expandable segments 8 GiB" refused "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" \
	PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$PY" -c "$torch_vmm" 2>&1 | sed 's/refused OutOfMemoryError/"error":"OUT_OF_MEMORY"/')"
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
check "env torch 4 GiB inside a captured graph" refused "$(env LD_PRELOAD="$LIB" "${envlimit[@]}" \
	"$PY" -c "$torch_graph" 2>&1 | sed 's/^refused .*/"error":"OUT_OF_MEMORY"/')"
# The stream-ordered allocator: inside capture the allocation is a graph memory node.
got=$(env LD_PRELOAD="$LIB" "${envlimit[@]}" PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
	"$PY" -c "$torch_graph" 2>&1; echo "exit $?")
check "env torch cudaMallocAsync 4 GiB inside a captured graph" refused "$(sed 's/^refused .*/"error":"OUT_OF_MEMORY"/' <<<"$got")"
grep -q '^refused' <<<"$got" || tail -n 25 <<<"$got" | sed 's/^/     /'
# What the same program does natively when the graph's memory is not there: ask for more than the
# device has (the driver's own out-of-memory at the graph's launch): PyTorch's own behaviour.
dev_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ -n "$dev_mib" ]; then
	got=$(env GRAPH_MIB=$((dev_mib + 16384)) PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
		"$PY" -c "$torch_graph" 2>&1; echo "exit $?")
	rec "native torch cudaMallocAsync, more than the device inside a graph" info --got "$(tail -n 3 <<<"$got" | tr '\n' ' ')" \
		--note "PyTorch's own behaviour on a failed graph launch (docs/benchmarks.md)"
fi
done_section
