#!/usr/bin/env bash
# Builds the device plugin image (default limitbed/device-plugin:dev) with no registry: FROM scratch
# with vgpu-device-plugin, vgpu-monitor and vgpu-scheduler (cgo: go-nvml dlopens libnvidia-ml.so.1, so they come with
# the host glibc files ldd names, the same glibc the fake driver needs), the host's static busybox (for
# images/plugin/install.sh only), libvgpu.so and its HAMi-core v2.10 build under /k8s-vgpu/lib/nvidia
# (HAMi's layout), and fakegpu's libraries, profiles and tools under /fakegpu for the test bed.
# The image label hashes the whole context; a run with nothing changed only rebuilds the binaries
# (cached by Go and make) and compares the hash.
#
# Env: PLUGIN_IMAGE, OUT (C build output, default ./build).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "plugin-image: $*" >&2; }
die() { echo "plugin-image: $*" >&2; exit 1; }

IMAGE=${PLUGIN_IMAGE:-limitbed/device-plugin:dev}
OUT=${OUT:-$PWD/build}
start=$SECONDS

make -s c OUT="$OUT" SAN= >&2 || die "C build failed"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
r=$ctx/rootfs
mkdir -p "$r/usr/bin" "$r/bin" "$r/k8s-vgpu/lib/nvidia" "$r/k8s-vgpu/bin" "$r/fakegpu/lib" "$r/fakegpu/profiles" "$r/fakegpu/bin"

# The node binaries as make go builds them (scripts/build-go.sh: its flags and tags).
CGO_ENABLED=1 scripts/build-go.sh "$r/usr/bin" \
	./plugin/cmd/vgpu-device-plugin ./plugin/cmd/vgpu-monitor ./plugin/cmd/vgpu-scheduler || die "go build failed"
# The shared libraries the binaries and the fake driver link, at their host paths (plus the loader).
for bin in "$r/usr/bin/"* "$OUT/lib/libcuda.so.1" "$OUT/lib/libnvidia-ml.so.1"; do
	ldd "$bin" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}'
done | sort -u | while read -r lib; do
	mkdir -p "$r$(dirname "$lib")"
	cp -L "$lib" "$r$lib"
done
[ -e "$r/lib64/ld-linux-x86-64.so.2" ] || die "the dynamic loader was not picked up by ldd"

busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 ||
	die "a static busybox is needed (apt-get install busybox-static)"
cp "$busybox" "$r/bin/busybox"
for applet in sh cp mv mkdir chmod cat ls echo rm sleep basename; do ln -s busybox "$r/bin/$applet"; done

cp "$OUT/lib/libvgpu.so" "$OUT/lib/libvgpu-hami-v2.10.so" "$r/k8s-vgpu/lib/nvidia/"
cp images/plugin/install.sh "$r/k8s-vgpu/bin/install.sh"
cp "$OUT/lib/libcuda.so.1" "$OUT/lib/libnvidia-ml.so.1" "$r/fakegpu/lib/"
cp fakegpu/profiles/*.profile "$r/fakegpu/profiles/"
# The tools the kind tier runs on the node (spawnat, gpuwork: the GPU's completed work) and in pods
# (cudaprobe, gpuinfo; hamicore-launchprobe: the compute limit's workload), from <hook>/vgpu/fakegpu/bin.
cp "$OUT/bin/cudaprobe" "$OUT/bin/gpuinfo" "$OUT/bin/spawnat" "$OUT/bin/gpuwork" "$OUT/bin/hamicore-launchprobe" "$r/fakegpu/bin/"
cp images/plugin/Dockerfile "$ctx/"

hash=$(cd "$ctx" && find . -type f -o -type l | LC_ALL=C sort | while read -r f; do echo "$f"; if [ -L "$f" ]; then readlink "$f"; else cat "$f"; fi; done | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{index .Config.Labels "org.limitbed.plugin.hash"}}' "$IMAGE" 2>/dev/null || true)
if [ "$have" = "$hash" ]; then
	log "$IMAGE is up to date (hash $hash, $((SECONDS - start))s)"
	exit 0
fi
DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" --label org.limitbed.plugin.hash="$hash" "$ctx" >/dev/null ||
	die "docker build $IMAGE failed"
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "$IMAGE built in $((SECONDS - start))s, size $((size / 1024 / 1024)) MiB (hash $hash)"
