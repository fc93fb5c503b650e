#!/usr/bin/env bash
# section: 09 drivertruth — the node monitor's driver-truth accounting (limitbed bench drivertruth --real): two containers as real cgroups, an honest process and a bypass; the driver's per-process figures against the monitor's attribution, in report and in kill mode (about 30 s; makes two cgroups under /sys/fs/cgroup and removes them)
source "$ROOT/harness/gpu/lib.sh"
need "$LIB" libvgpu.so
need "$REAL/cudaprobe" "cudaprobe (real driver)"
is_root || skip_section "needs root: it makes two cgroups and moves its processes into them (run ./gpu-check as root)"
[ -w /sys/fs/cgroup ] || skip_section "/sys/fs/cgroup is not writable here (a cgroup v2 hierarchy is needed)"
for mode in report kill; do
	kill_flag=()
	[ $mode = kill ] && kill_flag=(--kill)
	out=$("$LB" bench drivertruth --real --root "$ROOT" --build "$BUILD" "${kill_flag[@]}" 2>&1)
	rc=$?
	echo "$out"
	if [ $rc = 0 ] || [ $rc = 1 ]; then
		check "bench drivertruth ($mode)" "matches the driver" "$(grep -v '^ *$' <<<"$out" | tail -n 6)"
	else
		rec "bench drivertruth ($mode)" fail --note "limitbed bench drivertruth exited $rc: it could not run" --got "$(tail -n 4 <<<"$out")"
	fi
done
done_section
