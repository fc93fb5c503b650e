#!/usr/bin/env bash
# Builds every main package under plugin/ and harness/ into the given directory, reproducibly.
set -euo pipefail
out=${1:?usage: build-go.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
mapfile -t mains < <(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./plugin/... ./harness/... 2>/dev/null | sed '/^$/d')
[ ${#mains[@]} -gt 0 ] || { echo "build-go: no main packages yet"; exit 0; }
CGO_ENABLED=${CGO_ENABLED:-1} go build -trimpath -ldflags "-s -w -buildid=" -o "$out/" "${mains[@]}"
