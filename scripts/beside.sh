#!/usr/bin/env bash
# scripts/beside.sh NAME 'BACKGROUND' FOREGROUND...: run a check beside another. `make test`
# runs the package's check phase (nix-sandbox-check) beside the guest (guest-test): they share
# nothing (the check phase builds in a directory of its own, as another user, in namespaces of
# its own; the guest is a VM), and QEMU under TCG keeps the two cores only about two thirds busy.
# Side by side they took 504-591 s, against 632-686 s one after the other (BENCHMARKS.md, "The
# test build").
#
#   - BACKGROUND (a shell command) runs at nice 10, so that the guest keeps the larger share of
#     the cores; its output goes to a log, shown under NAME when it has ended.
#   - FOREGROUND runs as it is, its output as it comes.
#
# The exit status is FOREGROUND's when it failed, else 1 when BACKGROUND failed, else 0; each
# failure is named. An interrupt is passed on to BACKGROUND, which is waited for (its own
# clean-up runs), never left running.
set -euo pipefail
say() { printf 'beside: %s\n' "$*" >&2; }
[ $# -ge 3 ] || { say "usage: scripts/beside.sh NAME 'BACKGROUND' FOREGROUND..."; exit 2; }
name=$1 background=$2
shift 2

log=$(mktemp "/tmp/boxmaker-beside-$name.XXXXXX")
bg=""
show() {
    printf -- '--- %s (beside) ---\n' "$name" >&2
    cat "$log" >&2
    printf -- '--- end of %s: %s ---\n' "$name" "$1" >&2
}
cleanup() {
    if [ -n "$bg" ]; then
        kill -TERM -- "-$bg" 2>/dev/null || true
        wait "$bg" 2>/dev/null || true
        show "stopped"
    fi
    rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Its own session, so that an interrupt reaches all of it through its process group.
say "$name runs beside, at nice 10 (log: $log)"
setsid nice -n 10 /bin/sh -c "$background" >"$log" 2>&1 </dev/null &
bg=$!

fg_rc=0
"$@" || fg_rc=$?

kill -0 "$bg" 2>/dev/null && say "waiting for $name"
bg_rc=0
wait "$bg" || bg_rc=$?
bg=""
show "exit $bg_rc"

if [ "$fg_rc" -ne 0 ]; then
    [ "$bg_rc" -eq 0 ] || say "$name FAILED too (exit $bg_rc)"
    exit "$fg_rc"
fi
if [ "$bg_rc" -ne 0 ]; then
    say "$name FAILED (exit $bg_rc)"
    exit 1
fi
