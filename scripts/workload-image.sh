#!/usr/bin/env bash
# Builds the workload image (default limitbed/workload:dev) without any image registry:
#   1. debootstrap --variant=minbase bookworm with images/workload/packages.txt into a cache dir
#      ${LIMITBED_CACHE:-/var/cache/limitbed}/rootfs-workload-<hash>, reused when present;
#   2. docker import of that rootfs as limitbed/workload-rootfs:<hash>;
#   3. docker build of images/workload/Dockerfile FROM it (adds the entrypoint, and Debian's
#      nvidia-smi binary at /usr/bin/nvidia-smi: extracted from the non-free package by
#      scripts/nvidia-smi.sh, never installed; without it the image is built without nvidia-smi,
#      saying so, except under CI=true, where that is an error).
# The hash covers the package list, the rootfs setup script and the suite, so editing any of them
# rebuilds the rootfs; the image label covers the Dockerfile and entrypoint too, so a warm run with
# nothing changed only inspects the image (seconds). Concurrent runs are serialised by a lock file.
#
# Env: LIMITBED_CACHE, LIMITBED_DEBIAN_MIRROR (default: the host's apt sources), WORKLOAD_IMAGE.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "workload-image: $*"; }
die() { echo "workload-image: $*" >&2; exit 1; }

SUITE=bookworm
IMAGE=${WORKLOAD_IMAGE:-limitbed/workload:dev}
CACHE=${LIMITBED_CACHE:-/var/cache/limitbed}
SRC=images/workload

mkdir -p "$CACHE"
exec 9>"$CACHE/.workload-image.lock"
flock 9

packages=$(grep -v '^[[:space:]]*\(#\|$\)' "$SRC/packages.txt" | sort -u | paste -sd, -)
rootfs_hash=$( { echo "$SUITE"; echo "$packages"; cat "$SRC/rootfs-setup.sh"; } | sha256sum | cut -c1-16)
smi=$(scripts/nvidia-smi.sh) || smi=""
if [ -z "$smi" ]; then
	[ "${CI:-}" != true ] || die "Debian's nvidia-smi could not be had (scripts/nvidia-smi.sh above); CI needs it in the image"
	log "no nvidia-smi in the image: Debian's package could not be had (scripts/nvidia-smi.sh above); the checks that run it skip"
fi
smi_hash=none
[ -z "$smi" ] || smi_hash=$(sha256sum "$smi" | cut -c1-16)
image_hash=$( { echo "$rootfs_hash"; echo "nvidia-smi $smi_hash"; cat "$SRC/Dockerfile" "$SRC/entrypoint.sh"; } | sha256sum | cut -c1-16)
rootfs=$CACHE/rootfs-workload-$rootfs_hash
base=limitbed/workload-rootfs:$rootfs_hash

have=$(docker image inspect -f '{{index .Config.Labels "org.limitbed.workload.hash"}}' "$IMAGE" 2>/dev/null || true)
if [ "$have" = "$image_hash" ]; then
	log "$IMAGE is up to date (hash $image_hash)"
	exit 0
fi

start=$SECONDS

# debian_mirror prints the host's Debian mirror (deb822 or one-line sources), or deb.debian.org.
debian_mirror() {
	local m
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n' |
		grep -E '/debian/?$' | head -1 || true)
	[ -n "$m" ] || m=$(sed -n -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+\/debian\/?)[[:space:]]+'"$SUITE"'[[:space:]].*/\2/p' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1 || true)
	echo "${m:-http://deb.debian.org/debian}"
}

if [ -f "$rootfs/.complete" ]; then
	log "reusing rootfs $rootfs"
else
	[ "$(id -u)" -eq 0 ] || die "building the rootfs needs root (debootstrap, chroot); run as root once, later runs reuse $rootfs"
	command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing: apt-get install debootstrap"
	mirror=${LIMITBED_DEBIAN_MIRROR:-$(debian_mirror)}
	tmp=$rootfs.tmp
	rm -rf "$tmp"
	log "debootstrap --variant=minbase $SUITE from $mirror into $rootfs (packages: $packages)"
	debootstrap --variant=minbase --include="$packages" "$SUITE" "$tmp" "$mirror" >"$CACHE/debootstrap-workload.log" 2>&1 ||
		die "debootstrap failed; see $CACHE/debootstrap-workload.log"
	cp "$SRC/rootfs-setup.sh" "$tmp/tmp/rootfs-setup.sh"
	chroot "$tmp" /bin/sh /tmp/rootfs-setup.sh
	rm -f "$tmp/tmp/rootfs-setup.sh"
	touch "$tmp/.complete"
	mv "$tmp" "$rootfs"
	log "rootfs ready in $((SECONDS - start))s ($(du -sh "$rootfs" | cut -f1))"
fi

if ! docker image inspect "$base" >/dev/null 2>&1; then
	log "docker import $rootfs as $base"
	tar -C "$rootfs" --exclude=./.complete --numeric-owner -c . | docker import - "$base" >/dev/null
fi

log "docker build $IMAGE FROM $base"
# The legacy builder needs no buildx plugin and no registry; it is the only one Debian's docker.io has.
buildkit=0
docker buildx version >/dev/null 2>&1 && buildkit=1
# The build context: the image's files, and root/ (copied onto /) with nvidia-smi when there is one.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$SRC/Dockerfile" "$SRC/entrypoint.sh" "$ctx/"
mkdir -p "$ctx/root"
if [ -n "$smi" ]; then
	install -D -m 0755 "$smi" "$ctx/root/usr/bin/nvidia-smi"
fi
if ! out=$(DOCKER_BUILDKIT=$buildkit docker build -q -t "$IMAGE" \
	--build-arg BASE="$base" --build-arg WORKLOAD_HASH="$image_hash" "$ctx" 2>&1); then
	die "docker build failed: $out"
fi

size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "$IMAGE built in $((SECONDS - start))s, size $((size / 1024 / 1024)) MiB (hash $image_hash)"
