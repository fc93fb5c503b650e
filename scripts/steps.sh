# Sourced by the image scripts (scripts/node-image.sh, scripts/e2e.sh): runs a long job as named
# steps, each with its output in a log file of its own, and prints only progress on the terminal:
# the step's start, a heartbeat while it runs, its duration, and at the end a summary with the total.
# When a step fails, it says which one, shows the log's last lines and where the whole log is —
# a few lines, never the build's whole output.
#
#   steps_init PREFIX LOG_DIR    # once; PREFIX starts every line ("node-image")
#   step NAME CMD...             # run CMD with its stdout and stderr in LOG_DIR/<n>-<name>.log
#   step_shown NAME CMD...       # run CMD with its output left alone (a command with its own
#                                # progress and failure report, such as scripts/node-image.sh)
#   steps_summary                # "PREFIX: NAME  Ns" for every step, then the total
#   steps_on_exit RC             # call from the script's EXIT trap: reports a step that failed
#
# CMD runs in the calling shell (a function may set globals), under the caller's `set -e`: a failing
# command inside it ends the script, and the EXIT trap's steps_on_exit names the step (so never call
# `step` as a condition: `step … || …` would switch `set -e` off inside it). STEP_PROGRESS, when set
# to a function name before `step` is called, is called with the log's path at every heartbeat
# and prints a short progress note ("812 of 2140 packages compiled"). Messages go to stderr: a
# script's stdout stays its result (scripts/node-image.sh prints the image name there).
#
# Env: LIMITBED_STEP_HEARTBEAT_S (default 60): seconds between heartbeats; LIMITBED_STEP_TAIL
# (default 8): how many of a failed step's last log lines to show.

steps_init() {
	STEPS_PREFIX=$1
	STEPS_LOG_DIR=$2
	STEPS_START=$SECONDS
	STEPS_N=0
	STEPS_SUMMARY=()
	STEP_NAME= STEP_LOG= STEP_START=0 STEP_HEARTBEAT_PID=
	mkdir -p "$STEPS_LOG_DIR"
	# The terminal's stderr, kept: a step's own stderr goes to its log, and when a command fails
	# inside a step the EXIT trap still runs with that redirection in place.
	exec {STEPS_FD}>&2
}

steps_log() { echo "$STEPS_PREFIX: $*" >&"$STEPS_FD"; }

# step NAME CMD...: see the header.
step() {
	local name=$1 slug
	shift
	STEPS_N=$((STEPS_N + 1))
	slug=$(printf '%02d-%s' "$STEPS_N" "$(echo "$name" | tr -cs 'A-Za-z0-9.' '-' | tr 'A-Z' 'a-z' | cut -c1-40 | sed 's/-$//')")
	STEP_NAME=$name STEP_LOG=$STEPS_LOG_DIR/$slug.log STEP_START=$SECONDS
	steps_log "[$STEPS_N] $name ..."
	steps_heartbeat &
	STEP_HEARTBEAT_PID=$!
	"$@" >"$STEP_LOG" 2>&1
	steps_stop_heartbeat
	local took=$((SECONDS - STEP_START))
	STEPS_SUMMARY+=("$(printf '%-52s %6d s' "$name" "$took")")
	steps_log "[$STEPS_N] $name done in ${took}s"
	STEP_NAME= STEP_LOG=
}

# step_shown NAME CMD...: see the header. No log and no heartbeat: CMD reports for itself.
step_shown() {
	local name=$1
	shift
	STEPS_N=$((STEPS_N + 1))
	STEP_NAME=$name STEP_LOG= STEP_START=$SECONDS
	steps_log "[$STEPS_N] $name ..."
	"$@"
	local took=$((SECONDS - STEP_START))
	STEPS_SUMMARY+=("$(printf '%-52s %6d s' "$name" "$took")")
	steps_log "[$STEPS_N] $name done in ${took}s"
	STEP_NAME=
}

# steps_heartbeat runs in the background while a step runs. Its sleep is killed with it and holds
# no output open, so a caller reading the script's output sees its end when the script ends.
steps_heartbeat() {
	local every=${LIMITBED_STEP_HEARTBEAT_S:-60} start=$SECONDS note sleeper=
	trap '[ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null; exit 0' TERM
	while :; do
		sleep "$every" </dev/null >/dev/null 2>&1 {STEPS_FD}>&- &
		sleeper=$!
		wait "$sleeper" || true
		note=
		[ -z "${STEP_PROGRESS:-}" ] || note=$("$STEP_PROGRESS" "$STEP_LOG" 2>/dev/null || true)
		steps_log "    $STEP_NAME: $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s${note:+, $note}"
	done
}

steps_stop_heartbeat() {
	[ -n "${STEP_HEARTBEAT_PID:-}" ] || return 0
	kill "$STEP_HEARTBEAT_PID" 2>/dev/null || true
	wait "$STEP_HEARTBEAT_PID" 2>/dev/null || true
	STEP_HEARTBEAT_PID=
}

steps_summary() {
	local line
	steps_log "summary:"
	for line in "${STEPS_SUMMARY[@]}"; do steps_log "  $line"; done
	steps_log "  $(printf '%-52s %6d s' total $((SECONDS - STEPS_START)))"
}

# steps_on_exit RC: when the script ends inside a step, say which step failed, show the log's last
# lines and name the log.
steps_on_exit() {
	local rc=$1
	steps_stop_heartbeat
	[ -n "${STEP_NAME:-}" ] || return 0
	[ "$rc" -ne 0 ] || rc=1
	if [ -z "$STEP_LOG" ]; then
		steps_log "FAILED: step [$STEPS_N] $STEP_NAME (exit $rc, after $((SECONDS - STEP_START))s); its own report is above"
		STEP_NAME=
		return 0
	fi
	steps_log "FAILED: step [$STEPS_N] $STEP_NAME (exit $rc, after $((SECONDS - STEP_START))s); its last lines:"
	tail -n "${LIMITBED_STEP_TAIL:-8}" "$STEP_LOG" 2>/dev/null | cut -c1-300 | sed "s/^/$STEPS_PREFIX: | /" >&"$STEPS_FD"
	steps_log "full log: $STEP_LOG"
	STEP_NAME=
}
