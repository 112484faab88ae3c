#!/usr/bin/env bash
# Idempotence of an ansible-playbook command that has already run once (make testbed, then make idempotence):
#   pass 1 "second run": the command again; its recap must report changed=0 for every host;
#   pass 2 "check run":  the command with --check --diff; its recap must report changed=0 for every host and it
#                        must print no diff.
# A failing pass is named, with why: the playbook failed, or the tasks that changed something, or those that
# printed a diff.
# IDEMPOTENCE_SECOND_RUN_ARGS (optional, split on spaces) is added to pass 1 only: `make idempotence` makes the
# second run the existing-cluster path (testbed_cluster: existing on the same cluster), which must change nothing
# either, while the check run keeps the first run's arguments.
# Usage: hack/check-idempotent.sh ANSIBLE_PLAYBOOK ARGS...   e.g. hack/check-idempotent.sh .venv/bin/ansible-playbook site.yml
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 ANSIBLE_PLAYBOOK ARGS..." >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The recap and the task headers are parsed below: no colour codes in them.
export ANSIBLE_NOCOLOR=1

fail() {  # PASS WHY...
  local pass=$1; shift
  printf 'idempotence: %s FAILED: %s\n' "$pass" "$*" >&2
  exit 1
}

# The tasks (and handlers) of the log that reported "changed", once each.
changed_tasks() {
  awk '/^(TASK|RUNNING HANDLER) \[/ { task = $0; sub(/ \*+$/, "", task); shown = 0 }
       /^changed: / && !shown { print "  " task; shown = 1 }' "$log"
}

# The tasks of the log that printed a diff (the default callback starts each with "--- before").
diff_tasks() {
  awk '/^(TASK|RUNNING HANDLER) \[/ { task = $0; sub(/ \*+$/, "", task); shown = 0 }
       /^--- before/ && !shown { print "  " task; shown = 1 }' "$log"
}

run_pass() {  # PASS COMMAND...
  local pass=$1; shift
  echo "idempotence: $pass: $*"
  "$@" | tee "$log" || fail "$pass" "the playbook failed (exit status ${PIPESTATUS[0]}); its output is above"
  grep -qE '^\S+\s+: ok=' "$log" || fail "$pass" "no PLAY RECAP in the output (is the stdout callback 'default'?)"
  if grep -E '^\S+\s+: ok=' "$log" | grep -vq 'changed=0 '; then
    fail "$pass" "the recap reports changed tasks, which a converged test-bed must not have:
$(changed_tasks)"
  fi
}

# shellcheck disable=SC2086  # a list of arguments, split on purpose
run_pass "second run" "$@" ${IDEMPOTENCE_SECOND_RUN_ARGS:-}
echo "idempotence: second run reported changed=0"

run_pass "check run (--check --diff)" "$@" --check --diff
if grep -qE '^(--- before|\+\+\+ after)' "$log"; then
  fail "check run (--check --diff)" "these tasks printed a diff, so a run would change what they manage:
$(diff_tasks)"
fi
echo "idempotence: check run (--check --diff) reported changed=0 and no diff"
