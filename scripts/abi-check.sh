#!/usr/bin/env bash
# Proves that limitbed's own CUDA/NVML declarations (abi/include) match the real headers:
#   1. every constant, struct size and field offset in abi/check/*.def, printed through both
#      headers, must be identical;
#   2. every prototype in our header, redeclared after the real header, must compile (C rejects
#      a conflicting redeclaration).
#   3. (CUDA) every `CUresult CUDAAPI cu*` entry point cuda.h declares — as written, and as the
#      header's versioned (__CUDA_API_VERSION_INTERNAL) and per-thread-stream views name them — is
#      exported by fakegpu's libcuda.so.1 (implemented, or a CUDA_ERROR_NOT_SUPPORTED stub from
#      fakegpu/src/cuda_stubs.def); the missing ones are listed.
# NVML is checked against Debian's libnvidia-ml-dev (NVML_INCLUDE, default /usr/include).
# CUDA needs a toolkit's cuda.h: set CUDA_INCLUDE (the GPU job does); without it the CUDA half
# is reported as not checked, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
nvml_inc=${NVML_INCLUDE:-/usr/include}
cuda_inc=${CUDA_INCLUDE:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-gcc}
cflags=(-std=c11 -Wall -Wextra -Werror)

# prototypes FILE RETTYPE-REGEX: the function declarations of one of our headers.
prototypes() {
	awk -v re="$2" '$0 ~ re {p=1} p {print} p && /;[[:space:]]*$/ {p=0}' "$1"
}

# check NAME OURHDR REALDIR REALHDR DEFS PROTO_RE EXTRA_CFLAGS...
check() {
	local name=$1 ours=$2 realdir=$3 real=$4 defs=$5 re=$6
	shift 6
	if [ ! -f "$realdir/$real" ]; then
		echo "abi-check: $name: $realdir/$real not found" >&2
		return 1
	fi
	"$cc" "${cflags[@]}" "$@" -Iabi/include -DABI_HEADER="<$ours>" -DFIELDS="\"$defs\"" \
		abi/check/dump.c -o "$tmp/$name-ours"
	"$cc" "${cflags[@]}" "$@" -I"$realdir" -DABI_HEADER="<$real>" -DFIELDS="\"$defs\"" \
		abi/check/dump.c -o "$tmp/$name-real"
	"$tmp/$name-ours" >"$tmp/$name-ours.txt"
	"$tmp/$name-real" >"$tmp/$name-real.txt"
	if ! diff -u --label "ours (abi/include/$ours)" --label "real ($realdir/$real)" \
		"$tmp/$name-ours.txt" "$tmp/$name-real.txt"; then
		echo "abi-check: $name: our declarations differ from the real header (diff above)" >&2
		return 1
	fi
	{ echo "#include <$real>"; prototypes "abi/include/$ours" "$re"; } >"$tmp/$name-proto.c"
	if ! "$cc" "${cflags[@]}" "$@" -I"$realdir" -fsyntax-only "$tmp/$name-proto.c"; then
		echo "abi-check: $name: a prototype in abi/include/$ours conflicts with $real" >&2
		return 1
	fi
	echo "abi-check: $name: $(wc -l <"$tmp/$name-ours.txt") constants/sizes/offsets and" \
		"$(grep -c '(' "$tmp/$name-proto.c" || true) prototypes match $realdir/$real"
}

# exports REALDIR: every cu* entry point of REALDIR/cuda.h that fakegpu's libcuda.so.1 lacks.
exports() {
	local realdir=$1 lib=${FAKEGPU_LIB:-build/lib/libcuda.so.1} v
	# Built (incrementally) unless a library was named: a stale build would be judged otherwise.
	[ -n "${FAKEGPU_LIB:-}" ] || make -s -C fakegpu OUT="$PWD/build" >/dev/null
	grep -oE 'CUresult[[:space:]]+CUDAAPI[[:space:]]+cu[A-Za-z0-9_]+' "$realdir/cuda.h" | awk '{print $3}' >"$tmp/names"
	for v in "" -D__CUDA_API_VERSION_INTERNAL -D__CUDA_API_PER_THREAD_DEFAULT_STREAM; do
		"$cc" -E -P $v -I"$realdir" "$realdir/cuda.h" | tr -s ' \n' ' ' |
			grep -oE 'CUresult (CUDAAPI )?cu[A-Za-z0-9_]+ ?\(' | sed -E 's/CUresult (CUDAAPI )?//; s/ ?\(//' >>"$tmp/names"
	done
	sort -u "$tmp/names" >"$tmp/declared"
	nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$tmp/exported"
	comm -23 "$tmp/declared" "$tmp/exported" >"$tmp/missing"
	if [ -s "$tmp/missing" ]; then
		echo "abi-check: cuda: $(wc -l <"$tmp/missing") of $(wc -l <"$tmp/declared") entry points of $realdir/cuda.h" \
			"are not exported by $lib (add them to fakegpu/src/cuda_stubs.def):" >&2
		sed 's/^/    /' "$tmp/missing" >&2
		return 1
	fi
	echo "abi-check: cuda: all $(wc -l <"$tmp/declared") entry points of $realdir/cuda.h are exported by $lib"
}
if [ -n "${ABI_EXPORTS_ONLY:-}" ]; then
	exports "${cuda_inc:?ABI_EXPORTS_ONLY needs CUDA_INCLUDE}"
	exit
fi

check nvml limitbed/nvml_abi.h "$nvml_inc" nvml.h nvml_fields.def '^(nvmlReturn_t|const char \*)[[:space:]]*DECLDIR'
if [ -n "$cuda_inc" ]; then
	# The internal view of cuda.h declares each versioned entry point under its own name.
	check cuda limitbed/cuda_abi.h "$cuda_inc" cuda.h cuda_fields.def '^CUresult CUDAAPI' -D__CUDA_API_VERSION_INTERNAL
	exports "$cuda_inc"
else
	echo "abi-check: cuda: NOT CHECKED here (no CUDA toolkit; set CUDA_INCLUDE=/usr/local/cuda/include — the GPU job does)"
fi
