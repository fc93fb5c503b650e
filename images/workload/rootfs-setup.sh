#!/bin/sh
# Runs inside the freshly bootstrapped workload rootfs (chroot), once per cache entry.
# The rootfs cache key hashes this file too.
set -eu

# The non-root user the login-session methods switch to. "*" rather than a locked "!" password:
# key-based ssh works, no password login is possible.
useradd --uid 1000 --user-group --create-home --shell /bin/bash tenant
usermod -p '*' tenant
echo 'tenant ALL=(ALL) NOPASSWD: ALL' >/etc/sudoers.d/tenant
chmod 0440 /etc/sudoers.d/tenant

# Host keys are generated at container start (entrypoint), never baked into the image.
rm -f /etc/ssh/ssh_host_*
cat >/etc/ssh/sshd_config.d/limitbed.conf <<'CONF'
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
CONF

# Mount points the device plugin's Allocate response targets.
mkdir -p /usr/local/vgpu

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log
