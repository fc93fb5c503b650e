#!/usr/bin/env bash
# Prints the path of Debian's nvidia-smi binary (package nvidia-smi, non-free; bookworm ships the
# 535 series), extracted from the package into
#   ${LIMITBED_CACHE:-/var/cache/limitbed}/nvidia-smi/<package version>/nvidia-smi
# and never installed: the package depends on the real NVML (libnvidia-ml1), which would take
# libnvidia-ml.so.1's place on this machine ahead of fakegpu's. The .deb is fetched with
# `apt-get download` when no extracted copy of the candidate version is there yet.
# Exit 0 with the path on stdout; exit 3 with a message naming what is missing.
# Used by install-deps.sh (so make test and CI have it), the workload image and the Go tests
# (plugin/nvsmi finds the same path).
set -euo pipefail
cache=${LIMITBED_CACHE:-/var/cache/limitbed}/nvidia-smi
say() { echo "nvidia-smi.sh: $*" >&2; }

newest() { ls -d "$cache"/*/nvidia-smi 2>/dev/null | sort -V | tail -1; }

ver=$(apt-cache policy nvidia-smi 2>/dev/null | sed -n 's/^ *Candidate: //p')
if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
	if have=$(newest) && [ -n "$have" ]; then
		echo "$have"
		exit 0
	fi
	say "Debian's nvidia-smi package is unknown to apt: enable the non-free component in the apt sources" \
		"and run apt-get update (scripts/install-deps.sh does both)"
	exit 3
fi
dir=$cache/$ver
if [ -x "$dir/nvidia-smi" ]; then
	echo "$dir/nvidia-smi"
	exit 0
fi
mkdir -p "$cache" 2>/dev/null || { say "cannot create $cache (set LIMITBED_CACHE to a writable directory)"; exit 3; }
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$dir/nvidia-smi" ]; then
	tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	chmod 0777 "$tmp" # apt-get download drops to the _apt user when it can
	if ! (cd "$tmp" && apt-get download -q "nvidia-smi=$ver" >"$tmp/apt.log" 2>&1); then
		say "apt-get download nvidia-smi=$ver failed: $(tail -1 "$tmp/apt.log")"
		exit 3
	fi
	dpkg-deb -x "$tmp"/nvidia-smi_*.deb "$tmp/x"
	bin=$tmp/x/usr/lib/nvidia/current/nvidia-smi
	[ -x "$bin" ] || { say "the nvidia-smi $ver package has no usr/lib/nvidia/current/nvidia-smi"; exit 3; }
	mkdir -p "$dir.new"
	install -m 0755 "$bin" "$dir.new/nvidia-smi"
	rm -rf "$dir"
	mv "$dir.new" "$dir"
	say "extracted nvidia-smi $ver into $dir"
fi
echo "$dir/nvidia-smi"
