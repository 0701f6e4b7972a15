#!/usr/bin/env bash
# Runs inside the guest (boxmaker-guest-test.service, from the payload disk), as root, once the
# system is up; the unit powers the guest off when this ends. The checks are
# `boxmaker-e2e guest` (tests/e2e/src/guest/): it prints `ok NAME`, `FAIL NAME: why` or
# `skip NAME: why` per check and `N passed, M failed` last, on the serial console and into
# results/checks.log on the payload disk, which run.sh reads back, and leaves the journals
# beside it. This script passes it run.sh's guest.env, makes sure a summary ends the log even
# when the checks could not run to their end, and powers off.
set -uo pipefail

PAYLOAD=$(cd "$(dirname "$0")" && pwd)
RESULTS=$PAYLOAD/results
LOG=$RESULTS/checks.log
E2E=1
E2E_TIME_SCALE=5
E2E_ARGS=""
E2E_BACKENDS="podman bwrap"
[ -f "$PAYLOAD/guest.env" ] && . "$PAYLOAD/guest.env"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C.UTF-8
mkdir -p "$RESULTS"

rc=0
if [ -x "$PAYLOAD/bin/boxmaker-e2e" ]; then
    "$PAYLOAD/bin/boxmaker-e2e" guest --payload "$PAYLOAD" --e2e "$E2E" \
        --time-scale "$E2E_TIME_SCALE" --e2e-args "$E2E_ARGS" --backends "$E2E_BACKENDS" || rc=$?
else
    printf 'FAIL guest-checks: %s\n' "boxmaker-e2e is not in the payload" | tee -a "$LOG"
    rc=2
fi
# The checks end with their summary; if they could not, the log still gets one, counting this
# failure, so run.sh never reads a partial log as a pass.
if ! tail -n 1 "$LOG" 2>/dev/null | grep -qE '^[0-9]+ passed, [0-9]+ failed$'; then
    [ -x "$PAYLOAD/bin/boxmaker-e2e" ] &&
        printf 'FAIL guest-checks: boxmaker-e2e guest exited with %s before its summary\n' "$rc" | tee -a "$LOG"
    journalctl -b --no-pager >"$RESULTS/journal.txt" 2>&1 || true
    printf '%s passed, %s failed\n' "$(grep -c '^ok ' "$LOG")" "$(grep -c '^FAIL ' "$LOG")" | tee -a "$LOG"
    [ "$rc" -ne 0 ] || rc=1
fi
timeout 60 sync
# The results are on the payload disk: power off at once rather than through an orderly stop of
# every unit, which was seen to hang for minutes under TCG after a clean run. The unit's
# SuccessAction/FailureAction stay as the fallback.
systemctl --no-block --force poweroff
exit "$rc"
