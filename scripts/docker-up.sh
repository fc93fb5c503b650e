#!/usr/bin/env bash
# Makes a Docker engine answer on this machine. Idempotent; prints what it does.
#
# Where an engine already works (a laptop, a GitHub runner) it does nothing. Otherwise, as root:
#   1. installs Debian's docker.io if dockerd is missing;
#   2. starts dockerd in the background (log: /var/log/dockerd.log) and waits until `docker info` works;
#   3. runs a privileged probe container; only if runc fails with the capability error (a VM whose
#      bounding set lacks CAP_SYS_RESOURCE, which Docker 20.10 still asks for) installs a wrapper OCI
#      runtime that drops CAP_SYS_RESOURCE before calling the real runc, makes it the default runtime
#      in /etc/docker/daemon.json and restarts dockerd.
# No registry is needed: the probe image is a static busybox imported FROM scratch.
set -euo pipefail

log() { echo "docker-up: $*"; }
die() { echo "docker-up: $*" >&2; exit 1; }

DOCKERD_LOG=/var/log/dockerd.log
DAEMON_JSON=/etc/docker/daemon.json
WRAPPER=/usr/local/libexec/limitbed/runc-drop-sys-resource
RUNTIME_NAME=limitbed-runc
PROBE_IMAGE=limitbed/probe:busybox
WAIT_S=${DOCKER_UP_WAIT_S:-60}

engine_answers() { docker info >/dev/null 2>&1; }

wait_engine() {
	local i
	for ((i = 0; i < WAIT_S * 2; i++)); do
		engine_answers && return 0
		sleep 0.5
	done
	return 1
}

apt_install() {
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

have_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

start_dockerd() {
	if have_systemd; then
		log "systemctl start docker"
		systemctl start docker
	else
		log "starting dockerd in the background (log: $DOCKERD_LOG)"
		# setsid: the daemon must outlive this script and its process group.
		setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
	fi
	wait_engine || die "dockerd did not answer within ${WAIT_S}s; see $DOCKERD_LOG"
	log "engine answers"
}

stop_dockerd() {
	if have_systemd; then
		log "systemctl stop docker"
		systemctl stop docker
		return
	fi
	local pid
	pid=$(cat /var/run/docker.pid 2>/dev/null || true)
	[ -n "$pid" ] || die "dockerd runs but /var/run/docker.pid is missing; restart it yourself"
	log "stopping dockerd (pid $pid)"
	kill "$pid"
	local i
	for ((i = 0; i < WAIT_S * 2; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.5
	done
	die "dockerd (pid $pid) did not stop within ${WAIT_S}s"
}

# ensure_probe_image imports a one-file image (static busybox) so that no pull is needed.
ensure_probe_image() {
	docker image inspect "$PROBE_IMAGE" >/dev/null 2>&1 && return 0
	if [ ! -x /bin/busybox ]; then
		{ [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; } || return 1
		apt_install busybox-static
	fi
	local dir
	dir=$(mktemp -d)
	mkdir -p "$dir/bin"
	cp /bin/busybox "$dir/bin/busybox"
	ln -s busybox "$dir/bin/sh"
	ln -s busybox "$dir/bin/true"
	log "importing $PROBE_IMAGE (static busybox, FROM scratch)"
	tar -C "$dir" -c . | docker import - "$PROBE_IMAGE" >/dev/null
	rm -rf "$dir"
}

# privileged_probe prints runc's error and fails when a privileged container cannot start.
privileged_probe() {
	docker run --rm --privileged --network none "$PROBE_IMAGE" /bin/true 2>&1 >/dev/null
}

install_wrapper() {
	local real_runc
	real_runc=$(command -v runc) || die "runc not found"
	[ "$real_runc" != "$WRAPPER" ] || die "runc resolves to the wrapper itself"
	log "installing $WRAPPER (drops CAP_SYS_RESOURCE, then execs $real_runc)"
	mkdir -p "$(dirname "$WRAPPER")"
	cat >"$WRAPPER.tmp" <<EOF
#!/bin/sh
# OCI runtime wrapper installed by limitbed's scripts/docker-up.sh: this machine's capability bounding
# set lacks CAP_SYS_RESOURCE, which Docker still requests for privileged containers; drop it from every
# capability list of the bundle's config.json (create/run) or of the --process file (exec).
set -e
REAL_RUNC=$real_runc
EOF
	cat >>"$WRAPPER.tmp" <<'EOF'
drop() { # drop FILE JQ_PATH
	[ -f "$1" ] || return 0
	jq "if $2 then $2 |= map_values(if type == \"array\" then map(select(. != \"CAP_SYS_RESOURCE\")) else . end) else . end" "$1" >"$1.nosysres"
	mv "$1.nosysres" "$1"
}
cmd= bundle= process= prev=
for a in "$@"; do
	case "$prev" in
	--bundle | -b) bundle=$a ;;
	--process | -p) process=$a ;;
	esac
	case "$a" in
	--bundle=*) bundle=${a#--bundle=} ;;
	--process=*) process=${a#--process=} ;;
	create | run | exec) [ -z "$cmd" ] && cmd=$a ;;
	esac
	prev=$a
done
case "$cmd" in
create | run) drop "${bundle:-.}/config.json" .process.capabilities ;;
exec) [ -n "$process" ] && drop "$process" .capabilities ;;
esac
exec "$REAL_RUNC" "$@"
EOF
	chmod 0755 "$WRAPPER.tmp"
	mv "$WRAPPER.tmp" "$WRAPPER"

	log "registering runtime $RUNTIME_NAME as default in $DAEMON_JSON"
	mkdir -p "$(dirname "$DAEMON_JSON")"
	local cur='{}'
	[ -s "$DAEMON_JSON" ] && cur=$(cat "$DAEMON_JSON")
	jq --arg name "$RUNTIME_NAME" --arg path "$WRAPPER" \
		'.runtimes[$name] = {path: $path} | ."default-runtime" = $name' <<<"$cur" >"$DAEMON_JSON.tmp"
	mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
}

main() {
	command -v jq >/dev/null 2>&1 || { [ "$(id -u)" -eq 0 ] && apt_install jq; }

	if engine_answers; then
		log "engine answers"
	else
		[ "$(id -u)" -eq 0 ] || die "no Docker engine answers and not root: start Docker yourself"
		if ! command -v dockerd >/dev/null 2>&1; then
			apt_install docker.io
		fi
		start_dockerd
	fi

	if ! ensure_probe_image; then
		log "no static busybox to build the probe image and no apt as root: skipping the privileged probe"
		return 0
	fi
	local out
	if out=$(privileged_probe); then
		log "privileged probe container runs; nothing more to do"
		return 0
	fi
	case "$out" in
	*"unable to apply caps"* | *"operation not permitted"*) ;;
	*) die "privileged probe container failed for an unknown reason: $out" ;;
	esac
	[ "$(id -u)" -eq 0 ] || die "privileged containers fail ($out); run as root to install the runtime wrapper"
	log "privileged probe failed with the capability error; installing the runtime wrapper"
	install_wrapper
	stop_dockerd
	start_dockerd
	out=$(privileged_probe) || die "privileged probe still fails after installing the wrapper: $out"
	log "privileged probe container runs with $RUNTIME_NAME"
}

main "$@"
