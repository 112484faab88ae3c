#!/usr/bin/env bash
# Run an ansible-playbook command and fail unless its recap reports changed=0 for every host, naming the tasks
# that changed something.
set -euo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" | tee "$log"
if grep -E '^\S+\s+: ok=' "$log" | grep -vq 'changed=0 '; then
  echo "idempotence: the second run changed something:" >&2
  grep -B1 -E '^changed:' "$log" | grep -E '^TASK' >&2 || true
  exit 1
fi
echo "idempotence: second run reported changed=0"
