#!/usr/bin/env bash
# make e2e: the kind tier, in two parts.
#   1. The images, before anything with a deadline: the node image (the offline one is built here by
#      scripts/node-image.sh — make node-image — which on a cold machine compiles Kubernetes for tens
#      of minutes, with its own progress per component and total), the device plugin image (tagged
#      with the cluster's name, so that runs of other trees on the machine do not replace it) and the
#      workload image. Each step's output goes to a log under build/e2e; a failed step is named with
#      its log.
#   2. One go test process (harness/e2e, build tag "kind") that creates a kind cluster with the kind
#      Go library, loads those images, installs the chart with the Helm Go SDK, plays the HAMi
#      scheduler's part, runs the scenarios, exports the cluster's logs on failure and deletes the
#      cluster. Its deadlines cover only that: each set-up phase has its own, the scenarios go test's.
# Phases are logged with their durations; docs/e2e.md has the details and the measured timings.
#
# Env: LIMITBED_NODE_IMAGE  auto (default: stock kindest/node where a registry answers, else the
#                           offline image of scripts/node-image.sh) | stock | offline | <image ref>
#      LIMITBED_E2E_ARTIFACTS  where logs go on failure (default build/e2e-logs)
#      LIMITBED_E2E_KEEP=1     keep the cluster (kubeconfig path is logged)
#      E2E_RUN                 go test -run filter (default: all)
#      LIMITBED_E2E_CLUSTER    kind cluster name (default limitbed-e2e; a leftover one is deleted first)
#      LIMITBED_CACHE, GOMODCACHE, GOCACHE  the caches the image builds use (scripts/node-image.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "e2e: $*" >&2; }
die() { echo "e2e: $*" >&2; exit 1; }
# shellcheck source=steps.sh
. scripts/steps.sh

scripts/docker-up.sh
command -v debootstrap >/dev/null 2>&1 || log "note: debootstrap is missing; the offline node and workload images need it"

cluster=${LIMITBED_E2E_CLUSTER:-limitbed-e2e}
steps_dir=$PWD/build/e2e
steps_init e2e "$steps_dir"
BG_PIDS=()
on_exit() {
	steps_on_exit "$1"
	local p
	for p in "${BG_PIDS[@]}"; do pkill -TERM -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
}
trap 'on_exit $?' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# --- 1. images ------------------------------------------------------------------------------------
# Network- and disk-bound work starts first, beside the CPU-bound node image build: the modules the
# test and the plugin need, and the workload image (debootstrap).
go list -deps -test -tags kind ./harness/e2e/ ./plugin/cmd/vgpu-device-plugin ./plugin/cmd/vgpu-monitor \
	>/dev/null 2>"$steps_dir/modules.log" &
modules_pid=$!
BG_PIDS+=("$modules_pid")
scripts/workload-image.sh >"$steps_dir/workload-image.log" 2>&1 &
workload_pid=$!
BG_PIDS+=("$workload_pid")

# The choice (LIMITBED_NODE_IMAGE) is harness/nodeimage's, the same code the test would use. Built
# as the node image's Go builds are (CGO_ENABLED=0, -trimpath), what this compiles of the standard
# library on a cold machine is what the node image's build then finds in Go's build cache.
choose_node_image() {
	CGO_ENABLED=0 go run -trimpath ./harness/cmd/e2e-node-image "$PWD" >"$steps_dir/node-image.choice"
	cat "$steps_dir/node-image.choice"
}
step "node image: choose (LIMITBED_NODE_IMAGE=${LIMITBED_NODE_IMAGE:-auto})" choose_node_image
read -r node_kind node_ref <"$steps_dir/node-image.choice"
case "$node_kind" in
offline) step_shown "node image: build (make node-image)" scripts/node-image.sh ;;
use) log "node image $node_ref (kind pulls it when missing)" ;;
*) die "harness/cmd/e2e-node-image printed \"$node_kind $node_ref\"; want offline or use" ;;
esac

plugin_image=limitbed/device-plugin:$(echo "$cluster" | tr -c 'A-Za-z0-9_.\n-' '-')
step "plugin image $plugin_image" env PLUGIN_IMAGE="$plugin_image" scripts/plugin-image.sh

wait_for() { # wait_for PID LOG: a background job's end; its log when it failed
	wait "$1" || { cat "$2"; die "failed: see $2"; }
	cat "$2"
}
step "workload image (built beside the node image)" wait_for "$workload_pid" "$steps_dir/workload-image.log"
step "Go modules of the test and the plugin" wait_for "$modules_pid" "$steps_dir/modules.log"
BG_PIDS=()
steps_summary

# --- 2. the test ----------------------------------------------------------------------------------
export LIMITBED_E2E=1 LIMITBED_NODE_IMAGE=$node_ref LIMITBED_E2E_PLUGIN_IMAGE=$plugin_image
export LIMITBED_E2E_ARTIFACTS=${LIMITBED_E2E_ARTIFACTS:-$PWD/build/e2e-logs}
start=$SECONDS
rc=0
# -race, like make test: its vet (scripts/test-go.sh) compiled this tree with the kind tag already.
go test -race -tags kind -count=1 -v -timeout 40m -run "${E2E_RUN:-.}" ./harness/e2e/ || rc=$?
log "the test finished in $((SECONDS - start))s (exit $rc); make e2e took $((SECONDS - STEPS_START))s"
exit "$rc"
