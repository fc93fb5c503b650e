#!/usr/bin/env bash
# section: 00 abi — the project's CUDA and NVML declarations (abi/include) against this machine's toolkit headers (cuda.h, nvml.h): constants, struct sizes and offsets, prototypes, and every cu* entry point of cuda.h exported by fakegpu (scripts/abi-check.sh) (about 10 s; needs a CUDA toolkit's headers)
source "$ROOT/harness/gpu/lib.sh"
inc=${CUDA_INCLUDE:-/usr/local/cuda/include}
[ -f "$inc/cuda.h" ] && [ -f "$inc/nvml.h" ] ||
	skip_section "no CUDA toolkit headers at $inc (cuda.h, nvml.h): set CUDA_INCLUDE to the toolkit's include directory"
need "$BUILD/fake/lib/libcuda.so.1" fakegpu
out=$(cd "$ROOT" && NVML_INCLUDE="$inc" CUDA_INCLUDE="$inc" FAKEGPU_LIB="$BUILD/fake/lib/libcuda.so.1" scripts/abi-check.sh 2>&1)
rc=$?
echo "$out"
check "NVML declarations against the toolkit's nvml.h" "abi-check: nvml: .* match" "$out"
check "CUDA declarations against the toolkit's cuda.h" "abi-check: cuda: .* prototypes match" "$out"
check "every cu* entry point of cuda.h exported by fakegpu" "abi-check: cuda: all .* are exported" "$out"
[ $rc = 0 ] || fail=1
done_section
