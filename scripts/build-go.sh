#!/usr/bin/env bash
# Builds Go main packages into the given directory, reproducibly: every main package under plugin/
# and harness/, or the packages named after it. The one place the Go build's flags are written:
# make go, the plugin image (scripts/plugin-image.sh) and CI's cache warm-up (.ci/run) build
# through it, and plugin/cmd's TestNodeBinarySizes holds the node binaries it builds to their bound.
#   -tags grpcnotrace: grpc without its x/net/trace debug pages, which link html/template; its
#   reflection keeps the linker from dropping unused methods (about 20 MB of each node binary).
set -euo pipefail
out=${1:?usage: build-go.sh OUTDIR [PACKAGE...]}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
if [ $# -gt 0 ]; then
	mains=("$@")
else
	mapfile -t mains < <(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./plugin/... ./harness/... 2>/dev/null | sed '/^$/d')
fi
[ ${#mains[@]} -gt 0 ] || { echo "build-go: no main packages yet"; exit 0; }
CGO_ENABLED=${CGO_ENABLED:-1} go build -tags grpcnotrace -trimpath -ldflags "-s -w -buildid=" -o "$out/" "${mains[@]}"
