#!/usr/bin/env bash
# Builds the kind node image limitbed/kind-node:<kubernetes version>-<hash> with no image registry,
# from Debian packages and Go modules only (images/node/versions.env pins every version):
#   1. Go binaries: kubelet, kubeadm, kubectl, kube-apiserver, kube-controller-manager,
#      kube-scheduler, kube-proxy (a wrapper module that requires k8s.io/kubernetes and replaces its
#      ./staging paths with the published k8s.io/* modules), etcd, crictl, coredns (with the plugins of
#      kubeadm's Corefile only); pause with gcc;
#   2. debootstrap rootfs for the node (images/node/packages.txt) and for kube-proxy;
#   3. component images FROM scratch tagged with the registry.k8s.io names kubeadm expects;
#   4. node rootfs = debootstrap + kind's images/base files (from the sigs.k8s.io/kind module) +
#      images/node/files + rootfs-setup.sh in a chroot; the component images imported into its
#      /var/lib/containerd by a throwaway containerd;
#   5. docker import + images/node/Dockerfile (entrypoint, STOPSIGNAL).
# Every stage is cached under $LIMITBED_CACHE/node-image keyed by its inputs; the image tag hashes all
# inputs, so a run with nothing changed only inspects the image. Go's module and build caches are
# Go's own (GOMODCACHE, GOCACHE), shared with every other build on the machine.
#
# Each step's output goes to a log of its own under $LIMITBED_CACHE/node-image/logs; the terminal
# shows the steps, a heartbeat with the packages compiled so far, the duration of each and the total
# (scripts/steps.sh). A failed step is named with its log's last lines and the log's path.
#
# Usage: scripts/node-image.sh [--print]   (--print: print the image name and exit, build nothing)
# Env: LIMITBED_CACHE (default /var/cache/limitbed), LIMITBED_DEBIAN_MIRROR,
#      LIMITBED_NODE_IMAGE_SAVE=1 (also keep a docker-save tarball in the cache and load it when the
#      docker store lost the image), GOMODCACHE, GOCACHE, GOPROXY (Go's own).
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=images/node
# shellcheck source=../images/node/versions.env
. "$SRC/versions.env"
CACHE=${LIMITBED_CACHE:-/var/cache/limitbed}
WORK=$CACHE/node-image

input_hash=$( {
	cat "$0" "$SRC/versions.env" "$SRC/packages.txt" "$SRC/proxy-packages.txt" "$SRC/rootfs-setup.sh" "$SRC/Dockerfile"
	find "$SRC/files" -type f | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done
} | sha256sum | cut -c1-12)
IMAGE=limitbed/kind-node:$KUBERNETES_VERSION-$input_hash

if [ "${1:-}" = "--print" ]; then
	echo "$IMAGE"
	exit 0
fi

log() { echo "node-image: $*" >&2; }
die() { echo "node-image: $*" >&2; exit 1; }
# shellcheck source=steps.sh
. scripts/steps.sh

mkdir -p "$WORK"
exec 9>"$CACHE/.node-image.lock"
if ! flock -n 9; then
	log "another build holds $CACHE/.node-image.lock; waiting for it"
	flock 9
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
	log "$IMAGE is up to date"
	echo "$IMAGE"
	exit 0
fi

STAGE_DIR=$WORK/stage
BG_PIDS=()
cleanup() {
	local p
	for p in "${BG_PIDS[@]}" ${CTRD_PID:-}; do pkill -TERM -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	rm -rf "$STAGE_DIR" "${CTRD_TMP:-}"
}
on_exit() {
	steps_on_exit "$1"
	cleanup
}
trap 'on_exit $?' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
steps_init node-image "$WORK/logs"

tarball=$WORK/$(echo "$IMAGE" | tr '/:' '__').tar.gz
if [ -f "$tarball" ]; then
	step "docker load $tarball" sh -c "gzip -dc '$tarball' | docker load >/dev/null"
	echo "$IMAGE"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "building the node image needs root (debootstrap, chroot, containerd)"
for tool in go gcc debootstrap docker containerd ctr jq; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (scripts/install-deps.sh; containerd and ctr come with docker.io)"
done
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
# The compiler collects garbage less often: about a sixth less CPU for the same objects (measured
# in docs/benchmarks.md), for a fifth more memory per compile. Output does not depend on it.
export GOGC=${GOGC:-400}
log "building $IMAGE; the log of each step is under $WORK/logs"

# --- 1. Go binaries -------------------------------------------------------------------------------
BIN=$WORK/bin
mkdir -p "$BIN"
K8S_BIN=$BIN/kubernetes-$KUBERNETES_VERSION
K8S_SRC=$WORK/src/kubernetes-$KUBERNETES_VERSION
K8S_CMDS="kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy"
# CoreDNS with only the plugins of the Corefile kubeadm deploys (CoreDNS's documented way to choose
# plugins: a main that imports coremain and the plugins wanted). The stock build links every plugin
# — cloud DNS providers, etcd, tracing, QUIC — and takes several times as long.
COREDNS_PLUGINS="errors health ready kubernetes metrics forward cache loop reload loadbalance log hosts"
COREDNS_OUT=$BIN/coredns-$COREDNS_VERSION-$(echo "$COREDNS_PLUGINS" | sha256sum | cut -c1-8)
COREDNS_SRC=$WORK/src/coredns-$COREDNS_VERSION

# wrapper DIR MODULE@VERSION [REPLACE-LINES]: a module that requires MODULE, so its commands build
# from the proxy's zip.
wrapper() {
	local dir=$1 req=$2 replaces=${3:-}
	mkdir -p "$dir"
	{
		echo "module limitbed.local/nodeimage/$(basename "$dir")"
		echo
		echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/').0"
		echo
		echo "require ${req%@*} ${req#*@}"
		[ -z "$replaces" ] || printf 'replace (\n%s\n)\n' "$replaces"
	} >"$dir/go.mod"
}

# Each Go component: its wrapper module (prepare_*), then its build (build_*). The prepare step
# lists the packages it will compile with `go list -deps` — the same load as the build's, with the
# same tags — which downloads exactly the modules the build needs, and counts the packages for the
# heartbeat.
prepare_kubernetes() {
	local json gomod minor patch replaces
	json=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION") ||
		die "go mod download k8s.io/kubernetes@$KUBERNETES_VERSION: $(echo "$json" | jq -r '.Error // empty')"
	gomod=$(echo "$json" | jq -r .GoMod)
	minor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)
	patch=$(echo "$KUBERNETES_VERSION" | cut -d. -f3)
	# Every k8s.io/* module that k8s.io/kubernetes requires at v0.0.0 is one of its ./staging paths.
	replaces=$(sed -n -E 's#^\s*(k8s\.io/[a-z0-9-]+) v0\.0\.0$#\t\1 => \1 v0.'"$minor"'.'"$patch"'#p' "$gomod")
	[ -n "$replaces" ] || die "found no staging modules in $gomod"
	wrapper "$K8S_SRC" "k8s.io/kubernetes@$KUBERNETES_VERSION" "$replaces"
	local c pkgs=()
	for c in $K8S_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	(cd "$K8S_SRC" && go list -deps -tags selinux,notest "${pkgs[@]}") >"$K8S_SRC/packages.txt"
}
build_kubernetes() {
	local v=$KUBERNETES_VERSION minor ldflags="-s -w -buildid=" p c pkgs=()
	minor=$(echo "$v" | cut -d. -f2)
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=$(echo "${v#v}" | cut -d. -f1) -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	for c in $K8S_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	mkdir -p "$K8S_BIN"
	(cd "$K8S_SRC" && go build -v -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$K8S_BIN/" "${pkgs[@]}")
	touch "$K8S_BIN/.complete"
}

# prepare_tool NAME MODULE VERSION PACKAGE / build_tool NAME VERSION PACKAGE: one binary from a
# wrapper module.
prepare_tool() {
	local dir=$WORK/src/$1-$3
	wrapper "$dir" "$2@$3"
	(cd "$dir" && go list -deps "$4") >"$dir/packages.txt"
}
build_tool() {
	local name=$1 out=$BIN/$1-$2 dir=$WORK/src/$1-$2
	mkdir -p "$out"
	(cd "$dir" && go build -v -trimpath -ldflags "-s -w -buildid=" -o "$out/$name" "$3")
	touch "$out/.complete"
}

prepare_coredns() {
	local p
	wrapper "$COREDNS_SRC" "github.com/coredns/coredns@$COREDNS_VERSION"
	{
		echo "// CoreDNS with the plugins of kubeadm's Corefile only (written by scripts/node-image.sh)."
		echo "package main"
		echo
		echo "import ("
		echo '	"github.com/coredns/coredns/coremain"'
		for p in $COREDNS_PLUGINS; do echo "	_ \"github.com/coredns/coredns/plugin/$p\""; done
		echo ")"
		echo
		echo "func main() { coremain.Run() }"
	} >"$COREDNS_SRC/main.go"
	(cd "$COREDNS_SRC" && go list -deps .) >"$COREDNS_SRC/packages.txt"
}
build_coredns() {
	mkdir -p "$COREDNS_OUT"
	(cd "$COREDNS_SRC" && go build -v -trimpath -ldflags "-s -w -buildid=" -o "$COREDNS_OUT/coredns" .)
	touch "$COREDNS_OUT/.complete"
}

build_pause() {
	local out=$BIN/pause-$KUBERNETES_VERSION src
	src=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | jq -r .Dir)/build/pause/linux/pause.c
	mkdir -p "$out"
	gcc -Os -Wall -Werror -static -DVERSION="$KUBERNETES_VERSION" -o "$out/pause" "$src"
	strip "$out/pause"
	touch "$out/.complete"
}

# The Go components still to build: name, output directory, wrapper module, prepare and build
# commands.
GO_PARTS=()
go_part() { [ -f "$2/.complete" ] && { log "reusing $2"; return 0; }; GO_PARTS+=("$1|$2|$3|$4|$5"); }
go_part kubernetes "$K8S_BIN" "$K8S_SRC" prepare_kubernetes build_kubernetes
go_part etcd "$BIN/etcd-$ETCD_VERSION" "$WORK/src/etcd-$ETCD_VERSION" \
	"prepare_tool etcd go.etcd.io/etcd/server/v3 $ETCD_VERSION go.etcd.io/etcd/server/v3" \
	"build_tool etcd $ETCD_VERSION go.etcd.io/etcd/server/v3"
go_part crictl "$BIN/crictl-$CRICTL_VERSION" "$WORK/src/crictl-$CRICTL_VERSION" \
	"prepare_tool crictl sigs.k8s.io/cri-tools $CRICTL_VERSION sigs.k8s.io/cri-tools/cmd/crictl" \
	"build_tool crictl $CRICTL_VERSION sigs.k8s.io/cri-tools/cmd/crictl"
go_part coredns "$COREDNS_OUT" "$COREDNS_SRC" prepare_coredns build_coredns

# Every component's prepare starts at once, in the background, with the debootstraps: downloads are
# network-bound, so those of etcd, crictl and CoreDNS proceed while Kubernetes compiles, and each
# build waits only for its own (with_modules).
declare -A PREPARE_PIDS
start_prepares() {
	local part name src prep
	for part in "${GO_PARTS[@]}"; do
		IFS='|' read -r name _ src prep _ <<<"$part"
		rm -f "$src/packages.txt" # the heartbeat's count, until the new one is written
		# shellcheck disable=SC2086 # prep is a command line of this script's own words
		($prep) >"$STEPS_LOG_DIR/modules-$name.log" 2>&1 &
		PREPARE_PIDS[$name]=$!
		BG_PIDS+=("$!")
	done
}
# with_modules NAME CMD...: CMD once NAME's prepare has succeeded; its log goes to the step's first.
with_modules() {
	local name=$1 log=$STEPS_LOG_DIR/modules-$1.log
	shift
	wait "${PREPARE_PIDS[$name]}" || { cat "$log"; die "the modules of $name could not be listed or downloaded: see $log"; }
	cat "$log"
	"$@"
}

# go_progress LOG: the heartbeat's note during `go build -v` (one line per compiled package), against
# the packages the build loads (GO_PACKAGES_FILE, written by its prepare).
go_progress() {
	[ -s "$GO_PACKAGES_FILE" ] || { echo "downloading modules"; return; }
	echo "$(grep -cvE '^(go: |#|[[:space:]])' "$1" || true) of $(wc -l <"$GO_PACKAGES_FILE") packages compiled"
}

# --- 2. debootstrap rootfs ------------------------------------------------------------------------
debian_mirror() {
	local m
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n' |
		grep -E '/debian/?$' | head -1 || true)
	[ -n "$m" ] || m=$(sed -n -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+\/debian\/?)[[:space:]]+'"$DEBIAN_SUITE"'[[:space:]].*/\2/p' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1 || true)
	echo "${m:-http://deb.debian.org/debian}"
}

# rootfs NAME PACKAGES-FILE: prints the cached rootfs directory, building it when missing.
rootfs_dir() {
	local pkgs
	pkgs=$(grep -v '^[[:space:]]*\(#\|$\)' "$2" | sort -u | paste -sd, -)
	echo "$WORK/rootfs-$1-$( { echo "$DEBIAN_SUITE"; echo "$pkgs"; } | sha256sum | cut -c1-12)"
}
debootstrap_rootfs() {
	local name=$1 list=$2 dir pkgs
	dir=$(rootfs_dir "$name" "$list")
	[ -f "$dir/.complete" ] && { log "reusing $dir"; return; }
	pkgs=$(grep -v '^[[:space:]]*\(#\|$\)' "$list" | sort -u | paste -sd, -)
	rm -rf "$dir.tmp"
	debootstrap --variant=minbase --include="$pkgs" "$DEBIAN_SUITE" "$dir.tmp" \
		"${LIMITBED_DEBIAN_MIRROR:-$(debian_mirror)}" >"$STEPS_LOG_DIR/debootstrap-$name.log" 2>&1 ||
		die "debootstrap $name failed; see $STEPS_LOG_DIR/debootstrap-$name.log"
	chroot "$dir.tmp" apt-get clean
	rm -rf "$dir.tmp"/var/lib/apt/lists/* "$dir.tmp"/var/cache/apt/*.bin
	touch "$dir.tmp/.complete"
	mv "$dir.tmp" "$dir"
}

# The debootstraps are network- and disk-bound: run them while the Go builds use the CPUs.
(debootstrap_rootfs node "$SRC/packages.txt") >"$STEPS_LOG_DIR/rootfs-node.log" 2>&1 &
node_rootfs_pid=$!
BG_PIDS+=("$node_rootfs_pid")
(debootstrap_rootfs proxy "$SRC/proxy-packages.txt") >"$STEPS_LOG_DIR/rootfs-proxy.log" 2>&1 &
proxy_rootfs_pid=$!
BG_PIDS+=("$proxy_rootfs_pid")

start_prepares
# One build after the other, Kubernetes first: the later ones find the packages they share with it
# (the standard library, a few modules at the same version) in Go's build cache. Building etcd,
# crictl and CoreDNS at once instead cost 6 % more CPU (docs/benchmarks.md): on a machine whose CPUs
# are busy anyway — CI builds this beside make test — that is time lost.
STEP_PROGRESS=go_progress
for part in "${GO_PARTS[@]}"; do
	IFS='|' read -r name _ src _ build <<<"$part"
	GO_PACKAGES_FILE=$src/packages.txt
	case "$name" in
	kubernetes) what="kubernetes $KUBERNETES_VERSION ($(echo $K8S_CMDS | wc -w) commands)" ;;
	etcd) what="etcd $ETCD_VERSION" ;;
	crictl) what="crictl $CRICTL_VERSION" ;;
	coredns) what="coredns $COREDNS_VERSION (kubeadm's plugins)" ;;
	esac
	# shellcheck disable=SC2086 # build is a command line of this script's own words
	step "$what" with_modules "$name" $build
done
STEP_PROGRESS=

if [ -f "$BIN/pause-$KUBERNETES_VERSION/.complete" ]; then
	log "reusing $BIN/pause-$KUBERNETES_VERSION"
else
	step "pause (gcc)" build_pause
fi

wait_rootfs() {
	wait "$node_rootfs_pid" || { cat "$STEPS_LOG_DIR/rootfs-node.log"; die "node rootfs failed: $STEPS_LOG_DIR/rootfs-node.log"; }
	wait "$proxy_rootfs_pid" || { cat "$STEPS_LOG_DIR/rootfs-proxy.log"; die "kube-proxy rootfs failed: $STEPS_LOG_DIR/rootfs-proxy.log"; }
	cat "$STEPS_LOG_DIR/rootfs-node.log" "$STEPS_LOG_DIR/rootfs-proxy.log"
}
step "rootfs of the node and kube-proxy (debootstrap)" wait_rootfs
NODE_ROOTFS=$(rootfs_dir node "$SRC/packages.txt")
PROXY_ROOTFS=$(rootfs_dir proxy "$SRC/proxy-packages.txt")

# --- 3. component images --------------------------------------------------------------------------
# image_from NAME BASE FILE... : docker build of an image holding FILEs under /usr/local/bin.
image_from() {
	local name=$1 base=$2 ctx
	shift 2
	ctx=$(mktemp -d)
	cp "$@" "$ctx/"
	{
		echo "FROM $base"
		echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		for f in "$@"; do echo "COPY $(basename "$f") /usr/local/bin/"; done
		case "$name" in
		*/coredns:*) echo "COPY coredns /coredns"; echo 'ENTRYPOINT ["/coredns"]' ;;
		*/pause:*) echo "COPY pause /pause"; echo 'ENTRYPOINT ["/pause"]' ;;
		esac
	} >"$ctx/Dockerfile"
	DOCKER_BUILDKIT=0 docker build -q -t "$name" "$ctx" >/dev/null || { rm -rf "$ctx"; die "docker build $name failed"; }
	rm -rf "$ctx"
}

component_images() {
	local proxy_base=limitbed/kube-proxy-rootfs:$(basename "$PROXY_ROOTFS") img
	docker image inspect "$proxy_base" >/dev/null 2>&1 ||
		tar -C "$PROXY_ROOTFS" --exclude=./.complete --numeric-owner -c . | docker import - "$proxy_base" >/dev/null
	IMAGES=()
	while read -r img; do
		case "$img" in
		*/kube-proxy:*) image_from "$img" "$proxy_base" "$K8S_BIN/kube-proxy" ;;
		*/kube-*:*) local b=${img##*/}; image_from "$img" scratch "$K8S_BIN/${b%%:*}" ;;
		*/etcd:*) image_from "$img" scratch "$BIN/etcd-$ETCD_VERSION/etcd" ;;
		*/coredns:*) image_from "$img" scratch "$COREDNS_OUT/coredns" ;;
		*/pause:*) image_from "$img" scratch "$BIN/pause-$KUBERNETES_VERSION/pause"; PAUSE_IMAGE=$img ;;
		*) die "kubeadm expects an image this script cannot build: $img" ;;
		esac
		IMAGES+=("$img")
	done < <("$K8S_BIN/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION")
	[ -n "${PAUSE_IMAGE:-}" ] || die "kubeadm listed no pause image"
	log "component images: ${IMAGES[*]}"
	docker save -o "$WORK/components.tar" "${IMAGES[@]}"
}
step "component images" component_images

# --- 4. node rootfs -------------------------------------------------------------------------------
assemble_rootfs() {
	local kind base
	kind=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
	base=$kind/images/base/files
	rm -rf "$STAGE_DIR"
	cp -a "$NODE_ROOTFS" "$STAGE_DIR"
	rm -f "$STAGE_DIR/.complete"
	mkdir -p "$STAGE_DIR/kind" "$STAGE_DIR/etc/systemd/system/kubelet.service.d"
	cp -r "$base/kind/." "$STAGE_DIR/kind/"
	cp "$base/usr/local/bin/"* "$STAGE_DIR/usr/local/bin/"
	cp "$base/etc/crictl.yaml" "$STAGE_DIR/etc/"
	cp "$base/etc/containerd/config.toml" "$STAGE_DIR/etc/containerd/"
	cp "$base/etc/default/kubelet" "$STAGE_DIR/etc/default/"
	cp "$base/etc/sysctl.d/"* "$STAGE_DIR/etc/sysctl.d/"
	cp "$base/etc/systemd/system/"*.service "$base/etc/systemd/system/"*.slice "$STAGE_DIR/etc/systemd/system/"
	cp "$base/etc/systemd/system/kubelet.service.d/"* "$STAGE_DIR/etc/systemd/system/kubelet.service.d/"
	cp -r "$SRC/files/." "$STAGE_DIR/"
	# files from the module cache are read-only
	chmod -R u+w "$STAGE_DIR/kind" "$STAGE_DIR/etc" "$STAGE_DIR/usr/local/bin"
	cp "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$K8S_BIN/kubectl" "$STAGE_DIR/usr/bin/"
	cp "$BIN/crictl-$CRICTL_VERSION/crictl" "$STAGE_DIR/usr/local/bin/"
	cp "$SRC/rootfs-setup.sh" "$STAGE_DIR/tmp/"
	chroot "$STAGE_DIR" env KUBERNETES_VERSION="$KUBERNETES_VERSION" PAUSE_IMAGE="$PAUSE_IMAGE" /bin/sh /tmp/rootfs-setup.sh
}
step "node rootfs" assemble_rootfs

import_images() {
	CTRD_TMP=$(mktemp -d)
	cat >"$CTRD_TMP/config.toml" <<-EOF
		version = 2
		root = "$STAGE_DIR/var/lib/containerd"
		state = "$CTRD_TMP/state"
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "$CTRD_TMP/containerd.sock"
	EOF
	containerd --config "$CTRD_TMP/config.toml" >"$STEPS_LOG_DIR/containerd-import.log" 2>&1 &
	CTRD_PID=$!
	local i
	for i in $(seq 50); do
		ctr -a "$CTRD_TMP/containerd.sock" version >/dev/null 2>&1 && break
		sleep 0.2
	done
	ctr -a "$CTRD_TMP/containerd.sock" -n k8s.io images import --no-unpack --all-platforms "$WORK/components.tar" >/dev/null
	for i in "${IMAGES[@]}"; do
		ctr -a "$CTRD_TMP/containerd.sock" -n k8s.io images label "$i" io.cri-containerd.pinned=pinned >/dev/null
	done
	ctr -a "$CTRD_TMP/containerd.sock" -n k8s.io images ls -q >&2
	kill "$CTRD_PID"
	wait "$CTRD_PID" 2>/dev/null || true
	CTRD_PID=
}
step "component images into the node's containerd" import_images

# --- 5. the image ---------------------------------------------------------------------------------
make_image() {
	local base=limitbed/kind-node-rootfs:$KUBERNETES_VERSION-$input_hash
	tar -C "$STAGE_DIR" --numeric-owner -c . | docker import - "$base" >/dev/null
	DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" --build-arg BASE="$base" \
		--label org.limitbed.node.hash="$input_hash" "$SRC" >/dev/null
	docker rmi "$base" >/dev/null 2>&1 || true
	if [ "${LIMITBED_NODE_IMAGE_SAVE:-0}" = 1 ]; then
		docker save "$IMAGE" | gzip -1 >"$tarball.tmp" && mv "$tarball.tmp" "$tarball"
	fi
}
step "docker image" make_image
rm -f "$WORK/components.tar"

size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
steps_summary
log "$IMAGE built in $((SECONDS - STEPS_START))s, size $((size / 1024 / 1024)) MiB"
echo "$IMAGE"
