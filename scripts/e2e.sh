#!/usr/bin/env bash
# make e2e: the kind tier (harness/e2e, build tag "kind"). One go test process creates a kind cluster
# with the kind Go library, loads the locally built plugin and workload images, installs the chart
# with the Helm Go SDK, plays the HAMi scheduler's part, runs the scenarios, exports the cluster's
# logs on failure and deletes the cluster. Phases are logged with their durations; docs/e2e.md has
# the details and the measured timings.
#
# Env: LIMITBED_NODE_IMAGE  auto (default: stock kindest/node where a registry answers, else the
#                           offline image of scripts/node-image.sh) | stock | offline | <image ref>
#      LIMITBED_E2E_ARTIFACTS  where logs go on failure (default build/e2e-logs)
#      LIMITBED_E2E_KEEP=1     keep the cluster (kubeconfig path is logged)
#      E2E_RUN                 go test -run filter (default: all)
#      LIMITBED_E2E_CLUSTER    kind cluster name (default limitbed-e2e; a leftover one is deleted first)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/docker-up.sh
command -v debootstrap >/dev/null 2>&1 || echo "e2e: note: debootstrap is missing; the offline node and workload images need it" >&2

export LIMITBED_E2E=1
export LIMITBED_E2E_ARTIFACTS=${LIMITBED_E2E_ARTIFACTS:-$PWD/build/e2e-logs}
start=$SECONDS
rc=0
# -race, like make test: its vet (scripts/test-go.sh) compiled this tree with the kind tag already.
go test -race -tags kind -count=1 -v -timeout 40m -run "${E2E_RUN:-.}" ./harness/e2e/ || rc=$?
echo "e2e: finished in $((SECONDS - start))s (exit $rc)" >&2
exit "$rc"
