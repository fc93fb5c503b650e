# lib.sh: what every section of the GPU check shares (sourced by harness/gpu/sections/*.sh, which
# the entry, ./gpu-check, runs one at a time with this environment):
#
#   ROOT     the bundle (or the repository): hamicore/, fakegpu/, harness/, abi/
#   BUILD    the C build: lib/libvgpu.so, bin-real/ (against this machine's driver), fake/ (fakegpu)
#   RUN      the run directory: records/, series/, logs/ (docs/gpu-report.md)
#   LB       the limitbed binary (bench compute, bench drivertruth, bench pod)
#   GR       gpureport: limitbed gpu alone, quick to start (record: every check)
#   BIN      the bundle's Go binaries (limitbed, vgpu-scheduler, regiondump)
#   SECTION  this section's name; WORK a scratch directory of its own under /tmp (removed after)
#   PROFILE  the fakegpu profile of this card ("" when none); CARD_NAME its name
#
# A section writes its checks with rec/check/range_check, exits 0 (every check passed), 1 (a
# check failed) or 77 (it cannot run here: skip_section says why), and nothing else: any other
# exit status is reported as the section having broken.
# shellcheck shell=bash

LIB=$BUILD/lib/libvgpu.so
LEGACY=$BUILD/lib/libvgpu-hami-v2.10.so
REAL=$BUILD/bin-real
fail=0

# rec CHECK VERDICT [limitbed gpu record flags...]: one record (VERDICT auto judges --figure).
rec() {
	local name=$1 verdict=$2
	shift 2
	"$GR" record --run "$RUN" --section "$SECTION" --check "$name" --verdict "$verdict" "$@" || {
		echo "gpu-check: could not record \"$name\" (gpureport record failed above)" >&2
		fail=1
		return 0
	}
	# The verdict as written (auto judged, or a failure injected by GPU_CHECK_INJECT_FAIL).
	tail -n1 "$RUN/records/$SECTION.jsonl" | grep -q '"verdict":"fail"' && fail=1
	return 0
}

# check NAME WANT OUTPUT: WANT is refused | granted | a substring the output must contain.
check() {
	local name=$1 want=$2 got=$3 ok=0
	case $want in
	refused) grep -q '"error":"[A-Za-z_]*\(OUT_OF_MEMORY\|MemoryAllocation\)' <<<"$got" && ok=1 ;;
	granted) grep -q '"error":null' <<<"$got" && ok=1 ;;
	*) grep -q -- "$want" <<<"$got" && ok=1 ;;
	esac
	rec "$name" "$([ $ok = 1 ] && echo pass || echo fail)" --want "$want" --got "$(tr '\n' ' ' <<<"$got" | cut -c1-300)"
}

# range_check NAME FIGURE UNIT LO HI [more record flags...]: FIGURE within LO..HI (either may be "").
range_check() {
	local name=$1 figure=$2 unit=$3 lo=$4 hi=$5
	shift 5
	rec "$name" auto --figure "$figure" --unit "$unit" --lo "$lo" --hi "$hi" "$@"
}

# skip_section WHY: the whole section cannot run here; WHY names what is missing and the fix.
skip_section() {
	rec "section" skip --note "$1"
	exit 77
}

# skip CHECK WHY: one check cannot run here.
skip() { rec "$1" skip --note "$2"; }

# done_section: the exit status from the checks recorded.
done_section() { exit "$fail"; }

is_root() { [ "$(id -u)" -eq 0 ]; }
ROOT_WHY="needs root (a private mount namespace: unshare -m, mount): run ./gpu-check as root"

# PY is the Python that has PyTorch: GPU_CHECK_PYTHON (a virtual environment's python under sudo,
# whose PATH is root's), else python3.
PY=${GPU_CHECK_PYTHON:-python3}
# have_torch: $PY imports torch and sees a CUDA device.
have_torch() { "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }
TORCH_WHY="$PY cannot import torch with CUDA here (pip install torch for this driver's CUDA, or GPU_CHECK_PYTHON=/path/to/python of an environment that has it)"

# need FILE WHAT: FILE exists (a build product); else the section fails, naming the build log: a
# GPU machine that cannot build the tier's C is a finding, not a skip.
need() {
	[ -e "$1" ] && return 0
	rec "section" fail --note "$2 was not built ($1 missing): see logs/build.log"
	exit 1
}

# in_container LIB CMD...: no environment at all, the library only through /etc/ld.so.preload and
# the limits only through /overrideEnv ($WORK/limits, the pod's cache at $WORK/pod): a login
# session in a HAMi container (hamicore/test/privatens, root).
# GPU_CHECK_NS_ARGS (more privatens options) and GPU_CHECK_NS_ENV (VAR=VALUE words every process
# inside gets) make a driver that is not in the system's library path visible inside: the
# self-test's fakegpu. On a GPU machine both are empty.
in_container() {
	local l=$1 nv=() ns_args ns_env
	shift
	[ -d /usr/local/nvidia ] && nv=(--bind /usr/local/nvidia)
	read -r -a ns_args <<<"${GPU_CHECK_NS_ARGS:-}"
	read -r -a ns_env <<<"${GPU_CHECK_NS_ENV:-}"
	"$ROOT/hamicore/test/privatens" --preload "$l" --override-env "$WORK/limits" --private-tmp \
		--bind "$WORK/pod" "${nv[@]}" --bind "$ROOT" $(bind_build) "${ns_args[@]}" -- /usr/bin/env -i "${ns_env[@]}" "$@"
}

# bind_build: the build directory inside a private namespace too, when it is outside ROOT.
bind_build() {
	case $BUILD/ in "$ROOT"/*) ;; *) echo "--bind $BUILD" ;; esac
}

# pod_limits: the plugin's file for one 3000 MiB device (and 1000 MiB on a second), with the pod's
# cache directory: $WORK/limits, $WORK/pod; envlimit holds the same as environment variables.
pod_limits() {
	mkdir -p "$WORK/pod"
	printf 'CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_MEMORY_LIMIT_1=1000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s/usage.cache\nHAMI_LIMITS_FORMAT=1\n' \
		"$WORK/pod" >"$WORK/limits"
	envlimit=(CUDA_DEVICE_MEMORY_LIMIT_0=3000m CUDA_DEVICE_MEMORY_LIMIT_1=1000m "CUDA_DEVICE_MEMORY_SHARED_CACHE=$WORK/pod/usage.cache")
}

# series ID TITLE XLABEL YLABEL [REFNAME=VALUE...]: start series/ID.csv (a plot of the report).
series() {
	local id=$1 title=$2 x=$3 y=$4 r
	shift 4
	mkdir -p "$RUN/series"
	{
		echo "# title: $title"
		echo "# x: $x"
		echo "# y: $y"
		for r in "$@"; do echo "# ref ${r%%=*}: ${r#*=}"; done
		echo "x,line,y"
	} >"$RUN/series/$id.csv"
}

# point ID X LINE Y: one point of series ID (LINE names the line; no comma in it).
point() { [ -n "$2" ] && [ -n "$4" ] && echo "$2,${3//,/ },$4" >>"$RUN/series/$1.csv"; return 0; }

# json_num KEY JSON: the number after "KEY": in one JSON line ("" when absent).
json_num() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2" | head -1; }

# fakegpu_env: the environment that runs a program on fakegpu with this card's profile instead
# of the driver (the fidelity section's second side), in the array fake_env.
fakegpu_env() {
	mkdir -p "$WORK/fakegpu-state"
	fake_env=(LD_LIBRARY_PATH="$BUILD/fake/lib" FAKEGPU_PROFILE_DIR="$ROOT/fakegpu/profiles" FAKEGPU_PROFILE="$PROFILE"
		FAKEGPU_STATE_DIR="$WORK/fakegpu-state")
}

# median: the median of the numbers on stdin, one a line ("" when none).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
