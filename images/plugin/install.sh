#!/bin/sh
# Installs this image's libraries onto the node, as HAMi's vgpu-init.sh does: run by the chart's init
# container with the node's <hook-path>/vgpu mounted at the same path.
#   install.sh VGPU_DIR [FAKEGPU_DIR]
# VGPU_DIR gets libvgpu.so (and the HAMi-core v2.10 build), ld.so.preload naming the container path
# /usr/local/vgpu/libvgpu.so, and containers/. With FAKEGPU_DIR (test bed), fakegpu's lib/,
# profiles/ and bin/ are copied there too. Every file is replaced by rename, so processes that
# mapped the old library keep it.
set -eu
vgpu=${1:?usage: install.sh VGPU_DIR [FAKEGPU_DIR]}
fake=${2:-}

put() { # put SRC DST MODE
	cp "$1" "$2.tmp.$$"
	chmod "$3" "$2.tmp.$$"
	mv -f "$2.tmp.$$" "$2"
}

mkdir -p "$vgpu/containers"
for f in /k8s-vgpu/lib/nvidia/*.so; do
	put "$f" "$vgpu/$(basename "$f")" 0755
	echo "installed $vgpu/$(basename "$f")"
done
echo /usr/local/vgpu/libvgpu.so >"$vgpu/ld.so.preload.tmp.$$"
chmod 0644 "$vgpu/ld.so.preload.tmp.$$"
mv -f "$vgpu/ld.so.preload.tmp.$$" "$vgpu/ld.so.preload"
echo "installed $vgpu/ld.so.preload"

if [ -n "$fake" ]; then
	for sub in lib profiles bin; do
		mkdir -p "$fake/$sub"
		for f in /fakegpu/$sub/*; do
			put "$f" "$fake/$sub/$(basename "$f")" 0755
		done
	done
	echo "installed fakegpu into $fake"
fi
