#!/usr/bin/env bash
# gpu-bundle.sh OUT.tar.gz|OUT.tar: the GPU tier as one tarball (make gpu-bundle), for a GPU machine with
# no Go and no network: unpack it, then ./gpu-check (docs/gpu-report.md, "The bundle").
#
# It holds, under limitbed-gpu/: gpu-check (the entry), bin/{limitbed,vgpu-scheduler,gpureport,
# regiondump} (the Go binaries, built here), the C sources the GPU machine builds against its driver
# (abi/include, hamicore, fakegpu with its profiles, the memory judge's memload), harness/gpu (the
# sections, the probes, the workloads) and VERSION, GLIBC (the newest C library version the
# binaries need) and MANIFEST (every file's sha256). Nothing else: no tests, no build output.
#
# GPU_BUNDLE_GOFLAGS replaces the Go build flags (default: -trimpath -ldflags "-s -w -buildid=");
# the self-test builds with -race, which reuses the race-built packages of make test, into a
# plain .tar (not compressed: quicker to write and unpack on a 2-core machine).
set -euo pipefail
out=${1:?usage: gpu-bundle.sh OUT.tar.gz|OUT.tar}
cd "$(dirname "$0")/.."
root=$PWD
case $out in /*) ;; *) out=$root/$out ;; esac
for t in go gcc tar sha256sum; do command -v $t >/dev/null || { echo "gpu-bundle: no $t on PATH (it needs Go, gcc, tar, coreutils)" >&2; exit 2; }; done

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
top=$stage/limitbed-gpu
mkdir -p "$top/bin"

# The sources, as the repository has them (tracked files, and new ones not ignored).
paths=(abi/include abi/check scripts/abi-check.sh hamicore/Makefile hamicore/src hamicore/include hamicore/test/launchprobe.c hamicore/test/paths
	hamicore/test/privatens fakegpu/Makefile fakegpu/src fakegpu/tools fakegpu/profiles fakegpu/profile/keys.def harness/memjudge/real.sh
	harness/memjudge/memload harness/gpu)
if git rev-parse --git-dir >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files --cached --others --exclude-standard -- "${paths[@]}" | sort -u)
else
	mapfile -t files < <(find "${paths[@]}" -type f | sort)
fi
for f in "${files[@]}"; do
	[ -f "$f" ] || continue # deleted in the working tree
	case $f in *_test.go | *.test) continue ;; esac
	mkdir -p "$top/$(dirname "$f")"
	cp -p "$f" "$top/$f"
done
cp -p harness/gpu/gpu-check "$top/gpu-check"

# The Go binaries: limitbed and vgpu-scheduler link the NVML bindings (cgo: the C library is the
# only shared library they need); gpureport (the sections' records and the report) and
# regiondump are static.
read -r -a goflags <<<"${GPU_BUNDLE_GOFLAGS:--trimpath}"
ldflags=()
[ -z "${GPU_BUNDLE_GOFLAGS:-}" ] && ldflags=(-ldflags "-s -w -buildid=")
static=0
[[ " ${goflags[*]} " == *" -race "* ]] && static=1 # the race detector needs cgo
echo "gpu-bundle: go build ${goflags[*]} ${ldflags[*]} (limitbed, vgpu-scheduler, gpureport, regiondump)" >&2
CGO_ENABLED=1 go build "${goflags[@]}" "${ldflags[@]}" -o "$top/bin/" ./harness/cmd/limitbed ./plugin/cmd/vgpu-scheduler
CGO_ENABLED=$static go build "${goflags[@]}" "${ldflags[@]}" -o "$top/bin/gpureport" ./harness/cmd/gpureport
CGO_ENABLED=0 go build -trimpath -o "$top/bin/regiondump" ./plugin/cmd/regiondump
# They must run without Go: a plain environment, no GOROOT, nothing but the binary.
alone=$(env -i PATH=/usr/bin:/bin "$top/bin/limitbed" gpu 2>&1 || true)
grep -q 'usage: limitbed gpu' <<<"$alone" || { echo "gpu-bundle: the built limitbed does not run on its own: $alone" >&2; exit 1; }

commit=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo "no git")
echo "limitbed $commit, built $(date -u +%Y-%m-%dT%H:%MZ) with $(go env GOVERSION) on $(uname -m)" >"$top/VERSION"
if command -v objdump >/dev/null; then
	objdump -T "$top/bin/limitbed" "$top/bin/vgpu-scheduler" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 >"$top/GLIBC" || true
fi
(cd "$top" && find . -type f ! -name MANIFEST | sed 's|^\./||' | sort | xargs sha256sum >MANIFEST)

mkdir -p "$(dirname "$out")"
z=-z
case $out in *.tar) z= ;; *.tar.gz | *.tgz) ;; *) echo "gpu-bundle: $out: name it .tar.gz (or .tar)" >&2; exit 2 ;; esac
tar -C "$stage" --owner=0 --group=0 --numeric-owner $z -cf "$out.tmp" limitbed-gpu
mv "$out.tmp" "$out"
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1), $(wc -l <"$top/MANIFEST") files; $(cat "$top/VERSION"); needs $(cat "$top/GLIBC" 2>/dev/null || echo "glibc: unknown"))"
echo "gpu-bundle: on the GPU machine: tar xf $(basename "$out") && cd limitbed-gpu && sudo ./gpu-check"
