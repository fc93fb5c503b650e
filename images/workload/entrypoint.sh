#!/bin/bash
# Workload container entrypoint: starts sshd and cron, then runs the given command (or waits).
# Both daemons inherit this process's environment but build a fresh one for each session/job,
# exactly like in a real pod: that is what the harness's launch methods observe.
set -euo pipefail

mkdir -p /run/sshd
ssh-keygen -A >/dev/null # host keys per container, never baked into the image
/usr/sbin/sshd
cron # Debian's cron daemonises itself

if [ $# -gt 0 ]; then
	exec "$@"
fi
trap 'exit 0' TERM INT # PID 1 has no default signal action: stop quickly on docker stop
sleep infinity &
wait $!
