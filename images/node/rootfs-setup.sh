#!/bin/sh
# Runs inside a chroot of the node rootfs after scripts/node-image.sh copied kind's images/base files,
# the Kubernetes binaries and files/ into it. Does what kind's images/base Dockerfile does, adapted to
# Debian's containerd/runc/CNI packages. Env: KUBERNETES_VERSION, PAUSE_IMAGE.
set -eu

# systemd inside a container: kind's trimming of units, journald without kmsg.
find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
	/lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
	/lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>/etc/systemd/journald.conf
ln -sf /usr/lib/systemd/systemd /sbin/init

# Debian installs containerd in /usr/bin, kind's unit expects /usr/local/bin.
sed -i 's#^ExecStart=/usr/local/bin/containerd#ExecStart=/usr/bin/containerd#' /etc/systemd/system/containerd.service
rm -f /etc/systemd/system/containerd-fuse-overlayfs.service
systemctl enable kubelet.service containerd.service undo-mount-hacks.service limitbed-cni.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests /opt/cni/bin /etc/cni/net.d

# CNI plugins where containerd looks for them.
for p in /usr/lib/cni/*; do ln -sf "$p" /opt/cni/bin/; done

# containerd: no fuse-overlayfs proxy plugin; the pause image kubeadm expects; and
# restrict_oom_score_adj, because lowering oom_score_adj needs CAP_SYS_RESOURCE, which some hosts
# (and so their kind nodes) lack — without it every pod sandbox fails to start.
cfg=/etc/containerd/config.toml
sed -i '/^\[proxy_plugins\]/,/^$/d' "$cfg"
sed -i 's#^\(\s*sandbox_image\s*=\s*\).*#\1"'"$PAUSE_IMAGE"'"#' "$cfg"
sed -i 's#^\(\s*restrict_oom_score_adj\s*=\s*\).*#\1true#' "$cfg"
grep -q "sandbox_image = \"$PAUSE_IMAGE\"" "$cfg"
grep -q 'restrict_oom_score_adj = true' "$cfg"

# Base OCI spec with kind's product-files hook and no rlimits (as kind's base image generates it).
ctr oci spec |
	jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
	jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json

chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/*
echo "$KUBERNETES_VERSION" >/kind/version
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /tmp/*
