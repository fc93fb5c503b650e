#!/usr/bin/env bash
# The kind end-to-end tier lands after the harness; until then say so plainly and fail, so that
# nobody mistakes an empty run for a green matrix.
echo "make e2e: not yet available — the kind tier arrives after the harness (see README)." >&2
exit 2
