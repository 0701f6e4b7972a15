# The per-backend loop of tests/e2e/in-netns.sh, sourced by it (and by `make nix-check`, which
# runs it with stand-ins for `boxmaker-e2e run`). The caller defines `run_backend BACKEND`,
# which runs the scenarios on that backend and prints their lines, and sets `backends` and
# `work` (an existing directory). Each run's output is kept in $work/<backend>.out.
#
# A run passes only when it exits 0 and its last `<backend>: N passed, M failed` line says
# M = 0: a run that printed no summary (it never got to the scenarios, or its output was lost)
# counts one failure, as does one whose summary says any failed. The last line printed is the
# total, `N passed, M failed`; run_suites returns 0 only when every run passed. Each run's wall
# time follows it on standard error, `e2e: timing scenarios-<backend> Ns`.
#
# The runs go one after the other, not side by side: after every scenario a run checks that
# nothing is left, and what it looks for is the service user's, not its brokerd's (every
# sandbox process in another PID namespace, which a Podman container's are too, and every
# egress directory), as is what it removes after a failure; and both runs' calls land in the
# one set of test hosts' logs (the tailnet host's, the nameserver's), which scenarios read.
run_suites() {
    local b brc summary p f started rc=0 total_passed=0 total_failed=0
    for b in $backends; do
        printf 'e2e: running the scenarios on %s\n' "$b" >&2
        brc=0
        started=$SECONDS
        run_backend "$b" 2>&1 | tee "$work/$b.out" || brc=$?    # pipefail: the run's status unless tee failed
        printf 'e2e: timing scenarios-%s %ss\n' "$b" "$((SECONDS - started))" >&2
        summary=$(grep -E "^$b: [0-9]+ passed, [0-9]+ failed\$" "$work/$b.out" | tail -n 1 || true)
        if [ -n "$summary" ]; then
            p=${summary#"$b: "}; p=${p%% *}
            f=${summary%" failed"}; f=${f##* }
            total_passed=$((total_passed + p))
            total_failed=$((total_failed + f))
            [ "$f" -eq 0 ] || rc=1
        else
            total_failed=$((total_failed + 1))
            rc=1
            echo "FAIL $b/suite: boxmaker-e2e run exited with $brc without a summary"
        fi
        if [ "$brc" -ne 0 ]; then
            rc=1
            if [ -f "$work/$b/state/brokerd.log" ]; then
                printf "e2e: brokerd's log on %s (last 40 lines):\n" "$b" >&2
                tail -n 40 "$work/$b/state/brokerd.log" >&2
            fi
        fi
    done
    echo "$total_passed passed, $total_failed failed"
    return "$rc"
}
