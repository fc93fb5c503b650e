#!/usr/bin/env bash
# build.sh ROOT BUILD: the C the GPU check runs, built on the GPU machine against its driver with
# only the project's headers (abi/include): one line per product, OK or MISSING with the reason.
# A product that fails to build does not stop the others; the sections that need it skip and say
# so. Its compiler output goes to stdout (the entry puts it in logs/build.log).
#
#   BUILD/lib/libvgpu.so, libvgpu-hami-v2.10.so     the library and its HAMi-core v2.10 profile
#   BUILD/bin/hamicore-launchprobe                  the compute workloads (PTX kernels; dlopens libcuda.so.1)
#   BUILD/bin/path-*, BUILD/lib/path-dlsym-shim.so  the allocation-path programs, linked by soname
#   BUILD/bin-real/cudaprobe, gpuinfo, memload, gpuprobe   against this machine's driver
#   BUILD/bin-real/cudart_probe                     the CUDA runtime probe (nvcc; none without a toolkit)
#   BUILD/fake/lib/libcuda.so.1, libnvidia-ml.so.1  fakegpu, for the fidelity section's second side
#   BUILD/fake/bin/gpuwork, cudaprobe ...           its tools
#
# The linker finds libcuda.so.1 and libnvidia-ml.so.1 where the system keeps them (or through
# LIBRARY_PATH: the self-test points it at fakegpu, as the card's driver).
set -uo pipefail
root=${1:?usage: build.sh ROOT BUILD}
out=${2:?usage: build.sh ROOT BUILD}
jobs=$(nproc 2>/dev/null || echo 2)
status=0
mkdir -p "$out/bin-real" "$out/lib" "$out/bin"

step() { # NAME PRODUCT COMMAND...
	local name=$1 product=$2
	shift 2
	echo "---- $name: $*"
	if "$@" && [ -e "$product" ]; then
		printf 'build: OK      %-34s %s\n' "$name" "$product" >&2
	else
		printf 'build: MISSING %-34s %s (the compiler output is above, in logs/build.log)\n' "$name" "$product" >&2
		status=1
	fi
}

m() { make -s -j"$jobs" "$@"; }
step "libvgpu.so (current, v2.10)" "$out/lib/libvgpu-hami-v2.10.so" \
	m -C "$root/hamicore" OUT="$out" "$out/lib/libvgpu.so" "$out/lib/libvgpu-hami-v2.10.so"
step "hamicore-launchprobe" "$out/bin/hamicore-launchprobe" m -C "$root/hamicore" OUT="$out" "$out/bin/hamicore-launchprobe"
# Linked by soname, no fakegpu anywhere (PATH_LINK empty): the driver's libcuda.so.1 at run time.
step "allocation-path programs" "$out/bin/path-vmm" m -C "$root/hamicore" OUT="$out" PATH_LINK= paths
step "cudaprobe, gpuinfo (real driver)" "$out/bin-real/gpuinfo" m -C "$root/fakegpu" OUT="$out" tools-real
step "memload (real driver)" "$out/bin-real/memload" m -C "$root/harness/memjudge/memload" OUT="$out" real
step "gpuprobe (real driver)" "$out/bin-real/gpuprobe" m -C "$root/harness/gpu" OUT="$out" gpuprobe
step "fakegpu (fidelity)" "$out/fake/bin/gpuwork" m -C "$root/fakegpu" OUT="$out/fake"
# The fidelity section's scheduler runs on fakegpu find the library and the workload beside it
# (both load the driver by soname at run time: fakegpu's there).
mkdir -p "$out/fake/lib" "$out/fake/bin"
ln -sf ../../lib/libvgpu.so "$out/fake/lib/libvgpu.so"
ln -sf ../../bin/hamicore-launchprobe "$out/fake/bin/hamicore-launchprobe"
if command -v nvcc >/dev/null 2>&1; then
	step "cudart_probe (nvcc)" "$out/bin-real/cudart_probe" nvcc -O2 -o "$out/bin-real/cudart_probe" "$root/harness/gpu/cudart_probe.cu"
else
	echo "build: NONE    cudart_probe (no nvcc on PATH: the CUDA runtime checks skip)" >&2
fi
exit $status
