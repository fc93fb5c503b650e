#!/usr/bin/env bash
# The memory judge's C half (memload) on a real driver, judged by nvidia-smi's per-process figures:
# the GPU check's `judge` section (scripts/gpu-check.sh judge). The randomized judge (go test
# ./harness/memjudge/) needs fakegpu's record; this runs one fixed sequence per class of escape
# that docs/attacks.md lists, in one pod of several processes at once, and after every step reads
# what each process holds on each GPU.
#
#   harness/memjudge/real.sh env|login
#     env    processes started with LD_PRELOAD and the limits in their environment
#     login  processes with no environment at all (env -i) in a private mount namespace
#            (hamicore/test/privatens, root): the library through /etc/ld.so.preload, the limits
#            through /overrideEnv, as in a login session of a HAMi container
#
# Environment (the defaults are for a GPU machine):
#   JUDGE_MEMLOAD     memload (make -C harness/memjudge/memload real: $OUT/bin-real/memload)
#   JUDGE_LIB         libvgpu.so
#   JUDGE_TRUTH       a command printing "PID, GPU-UUID, MiB" per process and GPU (default
#                     nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits;
#                     fakegpu's fgtruth --csv prints the same, so the script is tested on fakegpu)
#   JUDGE_LIMIT_MIB   the first GPU's limit (3000); JUDGE_LIMIT1_MIB the second's (1000)
#   JUDGE_SLACK_MIB   what a process may hold beyond its charges and the memory it held after
#                     cuInit (its context; default 64): the driver grows a context as it is used
#                     (modules, graphs, more streams) and rounds allocations up
#   JUDGE_ENV         VAR=VALUE words every process gets besides (a test's fake host)
#   JUDGE_NS_ARGS     more privatens arguments for login (a test's fake host files)
#   JUDGE_RECORD      a command given each check as --check NAME --verdict pass|fail|skip --got
#                     DETAIL (the GPU tier's: limitbed gpu record --run RUN --section judge)
#   JUDGE_SERIES      a GPU-tier series file (docs/gpu-report.md) to append, at each never-over
#                     check, every live process's MiB by the truth and the pod's total
#
# Properties, after every step, on every GPU: (1) never over: the pod's processes hold no more
# than the limit + JUDGE_SLACK_MIB each, beyond what they held after cuInit; (2) never falsely
# refused: the steps marked "granted" fit under the limit by the driver's figures and must be
# granted. One line per check (PASS/FAIL, as gpu-check.sh prints them); exit 1 on any failure.
set -uo pipefail
mode=${1:?usage: real.sh env|login}
case $mode in env | login) ;; *) echo "real.sh: mode is env or login" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
memload=${JUDGE_MEMLOAD:?JUDGE_MEMLOAD: the memload binary}
lib=${JUDGE_LIB:?JUDGE_LIB: libvgpu.so}
truth_cmd=${JUDGE_TRUTH:-nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits}
limit0=${JUDGE_LIMIT_MIB:-3000} limit1=${JUDGE_LIMIT1_MIB:-1000} slack=${JUDGE_SLACK_MIB:-64}
read -r -a extra_env <<<"${JUDGE_ENV:-}"
read -r -a ns_args <<<"${JUDGE_NS_ARGS:-}"
read -r -a record <<<"${JUDGE_RECORD:-}"
checkpoint=0
MIB=1048576
work=$(mktemp -d /tmp/memjudge-real.XXXXXX)
pod=$work/pod
mkdir -p "$pod"
chmod 0755 "$work" "$pod"
cache=$pod/usage.cache
printf 'CUDA_DEVICE_MEMORY_LIMIT_0=%sm\nCUDA_DEVICE_MEMORY_LIMIT_1=%sm\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\nHAMI_LIMITS_FORMAT=1\n' \
	"$limit0" "$limit1" "$cache" >"$work/limits"
fail=0
declare -A IN OUT PID
names=()

cleanup() {
	local n
	for n in "${names[@]}"; do
		[ -n "${PID[$n]:-}" ] && kill -9 "${PID[$n]}" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT

# start NAME [VAR=VALUE...]: a memload process of the pod, the way the mode starts it.
start() {
	local name=$1 hello
	shift
	mkfifo "$work/$name.in" "$work/$name.out"
	if [ "$mode" = env ]; then
		env LD_PRELOAD="$lib" CUDA_DEVICE_MEMORY_LIMIT_0="${limit0}m" CUDA_DEVICE_MEMORY_LIMIT_1="${limit1}m" \
			CUDA_DEVICE_MEMORY_SHARED_CACHE="$cache" "${extra_env[@]}" "$@" "$memload" \
			<"$work/$name.in" >"$work/$name.out" 2>"$work/$name.err" &
		disown
	else
		local nvidia=()
		[ -d /usr/local/nvidia ] && nvidia=(--bind /usr/local/nvidia)
		"$root/hamicore/test/privatens" --preload "$lib" --override-env "$work/limits" --private-tmp \
			--bind "$pod" --bind "$root" --bind "$(dirname "$memload")" --bind "$(dirname "$lib")" "${nvidia[@]}" \
			"${ns_args[@]}" -- /usr/bin/env -i "${extra_env[@]}" "$@" "$memload" \
			<"$work/$name.in" >"$work/$name.out" 2>"$work/$name.err" &
		disown
	fi
	exec {fd}>"$work/$name.in"
	IN[$name]=$fd
	exec {fd}<"$work/$name.out"
	OUT[$name]=$fd
	names+=("$name")
	if ! read -r -t 60 -u "${OUT[$name]}" hello || [ "${hello%% *}" != hello ]; then
		report 0 "$name started" "$(tr '\n' ' ' <"$work/$name.err" | cut -c1-300)"
		exit 1
	fi
	PID[$name]=${hello#hello }
}

# say NAME COMMAND...: one command, its reply in $reply ("ok ..." / "err CODE ...").
say() {
	local name=$1
	shift
	echo "$*" >&"${IN[$name]}"
	if ! read -r -t 120 -u "${OUT[$name]}" reply; then
		reply="err -1 no reply (process gone: $(tr '\n' ' ' <"$work/$name.err" | cut -c1-300))"
	fi
}

# held UUID: $held, the MiB the pod's live processes hold on the GPU beyond their baselines, and
# $holdings, who holds what.
declare -A BASE HELD
held() {
	local uuid=$1 n m t
	t=$($truth_cmd 2>/dev/null)
	held=0 holdings=""
	for n in "${names[@]}"; do
		[ -n "${PID[$n]:-}" ] || continue
		m=$(awk -F', *' -v p="${PID[$n]}" -v u="$uuid" '$1 == p && $2 == u {s += $3} END {print s + 0}' <<<"$t")
		HELD[$n]=$m
		held=$((held + m - ${BASE[$n,$uuid]:-0}))
		holdings+=" $n ${m} MiB (${BASE[$n,$uuid]:-0} at start);"
	done
}

# baseline NAME UUID: what NAME holds now (its context) is not charged to it.
baseline() {
	local t
	t=$($truth_cmd 2>/dev/null)
	BASE[$1,$2]=$(awk -F', *' -v p="${PID[$1]}" -v u="$2" '$1 == p && $2 == u {s += $3} END {print s + 0}' <<<"$t")
}

live() { local n c=0; for n in "${names[@]}"; do [ -n "${PID[$n]:-}" ] && c=$((c + 1)); done; echo $c; }

report() { # OK NAME DETAIL
	[ "$1" = 1 ] || fail=1
	printf '%-4s %-46s %s\n' "$([ "$1" = 1 ] && echo PASS || echo FAIL)" "judge $mode $2" "$3"
	[ ${#record[@]} -eq 0 ] || "${record[@]}" --check "$mode $2" --verdict "$([ "$1" = 1 ] && echo pass || echo fail)" \
		--got "$3" >/dev/null || fail=1
}

# plot CLASS: every live process's MiB by the truth, and the pod's total beyond the baselines,
# as a point of JUDGE_SERIES (after held).
plot() {
	local n
	[ -n "${JUDGE_SERIES:-}" ] || return 0
	checkpoint=$((checkpoint + 1))
	for n in "${names[@]}"; do
		[ -n "${PID[$n]:-}" ] && echo "$checkpoint,$mode $n,${HELD[$n]:-0}" >>"$JUDGE_SERIES"
	done
	echo "$checkpoint,$mode pod total beyond contexts,$held" >>"$JUDGE_SERIES"
}

# never_over CLASS UUID LIMIT: property (1) on one GPU.
never_over() {
	local h allow
	held "$2"
	plot "$1"
	h=$held
	allow=$(($3 + slack * $(live)))
	if [ "$h" -le "$allow" ]; then
		report 1 "$1: never over" "${h} MiB held of ${3} MiB (+${slack} MiB a process):$holdings"
	else
		report 0 "$1: never over" "${h} MiB held, over ${3} MiB + ${slack} MiB a process:$holdings"
	fi
}

# expect CLASS WHAT granted|refused NAME COMMAND...: a step whose answer is known. COMMAND's first
# argument names the object it makes (alloc ID, graph ID, ipcopen ID, vmmimport ID).
expect() {
	local class=$1 what=$2 want=$3 name=$4 got
	shift 4
	say "$name" "$@"
	case $reply in
	ok*) got=granted ;;
	"err 2"*) got=refused ;;
	*) got="error ($reply)" ;;
	esac
	report "$([ "$got" = "$want" ] && echo 1 || echo 0)" "$class: $what" "want $want, got $got"
	# Granted over the limit: given back, so that the steps after it are judged on their own.
	[ "$want" = refused ] && [ "$got" = granted ] && say "$name" free "$2"
	return 0
}

kill9() { kill -9 "${PID[$1]}" 2>/dev/null; PID[$1]=""; }

MB() { echo $(($1 * MIB)); }

# ---- the pod: p0 and p1 on the first GPU (ordinal 0 when nothing is reordered)
start p0
say p0 init 0
[ "${reply%% *}" = ok ] || { report 0 "start" "p0 init: $reply"; exit 1; }
gpu0=${reply#ok }
baseline p0 "$gpu0"
start p1
say p1 init 0
baseline p1 "$gpu0"

# Every allocation path of the driver API up to the limit, and past it.
class=paths
expect $class "cuMemAlloc 1024 MiB" granted p0 alloc 1 mem "$(MB 1024)"
expect $class "cuMemAllocPitch 512 MiB" granted p0 alloc 2 pitch "$(MB 512)"
held "$gpu0"
# The truth must see the pod (a driver's figures that miss its processes would pass everything).
report "$([ "$held" -ge 1536 ] && echo 1 || echo 0)" "$class: the truth sees the pod" "${held} MiB held of the 1536 granted:$holdings"
expect $class "cuMemAllocManaged 2048 MiB (over)" refused p0 alloc 3 managed "$(MB 2048)"
expect $class "cuMemAllocAsync 2048 MiB (over)" refused p0 alloc 3 async "$(MB 2048)"
expect $class "pool 2048 MiB (over)" refused p0 alloc 3 pool "$(MB 2048)"
expect $class "cuMemCreate 2048 MiB (over)" refused p0 alloc 3 vmm "$(MB 2048)"
expect $class "cuArrayCreate 2048 MiB (over)" refused p0 alloc 3 array "$(MB 2048)"
expect $class "cuArray3DCreate 2048 MiB (over)" refused p0 alloc 3 array3d "$(MB 2048)"
expect $class "cuMipmappedArrayCreate 2000 MiB (over)" refused p0 alloc 3 mipmap "$(MB 2000)"
expect $class "graph of 4 nodes, 2048 MiB (over)" refused p0 graph 3 4 "$(MB 2048)" 0
never_over $class "$gpu0" "$limit0"
# The 32-bit entry points of CUDA 3.x, still exported.
class=legacy
expect $class "cuMemAlloc (v1) 2000 MiB (over)" refused p0 alloc 3 mem1 "$(MB 2000)"
expect $class "cuMemAllocPitch (v1) 2000 MiB (over)" refused p0 alloc 3 pitch1 "$(MB 2000)"
expect $class "cuArrayCreate (v1) 2000 MiB (over)" refused p0 alloc 3 array1 "$(MB 2000)"
expect $class "cuArray3DCreate (v1) 2000 MiB (over)" refused p0 alloc 3 array3d1 "$(MB 2000)"
never_over $class "$gpu0" "$limit0"
# Device memory the program sizes through the driver: heap, stack, a module's globals.
class=program-chosen
expect $class "cuCtxSetLimit malloc heap 2048 MiB (over)" refused p0 alloc 3 heap "$(MB 2048)"
expect $class "cuCtxSetLimit stack 2048 MiB (over)" refused p0 alloc 3 stack "$(MB 2048)"
expect $class "module with a 2048 MiB global (over)" refused p0 alloc 3 module "$(MB 2048)"
expect $class "module with a 64 MiB global" granted p0 alloc 4 module "$(MB 64)"
say p0 free 4
never_over $class "$gpu0" "$limit0"
# Contexts beyond the first on a GPU are charged (docs/hamicore.md): created ones until refused.
class=contexts
for i in 1 2 3; do say p1 ctxcreate $((20 + i)) 0; done
never_over $class "$gpu0" "$limit0"
for i in 1 2 3; do say p1 free $((20 + i)); done
say p1 use 0
# A table of allocation nodes larger than any fixed table.
class=tables
expect $class "graph of 1030 nodes, 2060 MiB (over)" refused p1 graph 5 1030 "$(MB 2060)" 0
never_over $class "$gpu0" "$limit0"
# A signal handler that allocates while its thread is inside a hook.
class=reentrancy
say p1 sigalloc "$(MB 1024)" 4
report 1 "$class: handler allocations" "$reply (granted refused)"
never_over $class "$gpu0" "$limit0"
say p1 sigfree
# Memory another process imports: a legacy IPC handle, a VMM allocation exported as a descriptor.
class=imports
expect $class "p1 cuMemAlloc 512 MiB, exported by IPC handle" granted p1 alloc 6 mem "$(MB 512)"
say p1 ipcget 6
expect $class "p0 opens it (charged again: 2560 of ${limit0} MiB)" granted p0 ipcopen 7 "${reply#ok }"
never_over $class "$gpu0" "$limit0"
say p0 free 7
expect $class "p1 cuMemCreate 256 MiB, exported as a descriptor" granted p1 alloc 8 vmmx "$(MB 256)"
say p1 vmmexport 8
read -r _ xpid xfd <<<"$reply"
expect $class "p0 imports it (charged again: 2560 of ${limit0} MiB)" granted p0 vmmimport 9 "$xpid" "$xfd" "$(MB 256)"
never_over $class "$gpu0" "$limit0"
say p0 free 9
for id in 8 6; do say p1 free $id; done
# Liveness: a process that closes usage.cache's descriptor, or every descriptor it has, still
# holds its memory; nobody may reclaim it.
class=liveness
expect $class "p0 holds 1024+512 MiB, p1 1400 MiB" granted p1 alloc 10 mem "$(MB 1400)"
say p0 closecache "$cache"
start p2
say p2 init 0
baseline p2 "$gpu0"
expect $class "after p0 closed usage.cache: p2 1024 MiB (over)" refused p2 alloc 1 mem "$(MB 1024)"
never_over $class "$gpu0" "$limit0"
say p0 closeall keepdriver # all but a real driver's /dev/nvidia*, which would end its context
start p3
say p3 init 0
baseline p3 "$gpu0"
expect $class "after p0 closed every descriptor: p3 1024 MiB (over)" refused p3 alloc 1 mem "$(MB 1024)"
never_over $class "$gpu0" "$limit0"
kill9 p0
kill9 p3
# A killed process's memory comes back to the pod.
class=kill
say p2 alloc 1 mem "$(MB 1024)"
for _ in 1 2 3 4 5 6 7 8 9 10; do
	[ "${reply%% *}" = ok ] && break
	sleep 0.5
	say p2 alloc 1 mem "$(MB 1024)"
done
report "$([ "${reply%% *}" = ok ] && echo 1 || echo 0)" "$class: p2 1024 MiB once p0 is killed" "$reply"
never_over $class "$gpu0" "$limit0"
say p1 free 10
say p2 free 1
# The CUDA ordinal is not the GPU: with CUDA_VISIBLE_DEVICES=1,0 ordinal 0 is the second GPU,
# charged to its own limit (needs 2 GPUs).
class=ordinal
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ -n "${JUDGE_GPUS:-}" ] && ngpu=$JUDGE_GPUS
if [ "${ngpu:-0}" -ge 2 ]; then
	start p4 CUDA_VISIBLE_DEVICES=1,0
	say p4 init 0
	gpu1=${reply#ok }
	baseline p4 "$gpu1"
	report "$([ "$gpu1" != "$gpu0" ] && echo 1 || echo 0)" "$class: ordinal 0 of p4 is the second GPU" "$gpu1"
	expect $class "p4 ordinal 0: 1200 MiB (over the second GPU's ${limit1} MiB)" refused p4 alloc 1 mem "$(MB 1200)"
	expect $class "p4 ordinal 0: 800 MiB" granted p4 alloc 1 mem "$(MB 800)"
	never_over $class "$gpu1" "$limit1"
	say p4 init 1
	baseline p4 "$gpu0"
	expect $class "p4 ordinal 1 (the first GPU): 2048 MiB" granted p4 alloc 2 mem "$(MB 2048)"
	never_over $class "$gpu0" "$limit0"
else
	echo "SKIP judge $mode $class: needs 2 GPUs"
	[ ${#record[@]} -eq 0 ] || "${record[@]}" --check "$mode $class" --verdict skip --note "needs 2 GPUs (CUDA_VISIBLE_DEVICES=1,0)" >/dev/null
fi
for n in "${names[@]}"; do [ -n "${PID[$n]}" ] && echo exit >&"${IN[$n]}"; done
exit $fail
