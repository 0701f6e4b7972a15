#!/usr/bin/env bash
# `make mcp-test` (as root): `boxctl mcp` against a real brokerd, driven by a client boxmaker
# did not write, the official Python MCP SDK (pinned by scripts/setup.sh mcp-client).
#
# brokerd runs as the service user with the bwrap backend over a tools tree made here
# (milliseconds a call, no image, no Podman), in a network namespace of its own that holds
# only lo: http_fetch really runs, and its egress proxy finds no name and no route, so no
# packet leaves. tests/mcp/client.py then checks what an MCP agent sees (see its header), and
# this script checks what brokerd saw: its audit chain holds, it is still serving, no sandbox
# is left. Everything made here is removed on exit, whatever happens.
#
#   tests/mcp/run.sh    MCP_SKIP_SETUP=1 skips scripts/setup.sh all (a host where it ran; the
#                       SDK's venv is always checked); MCP_SKIP_BUILD=1 takes the binaries as
#                       they are in the target directory (CARGO_TARGET_DIR or target/)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
MUSL=x86_64-unknown-linux-musl
target=${CARGO_TARGET_DIR:-$repo/target}
brokerd=$target/release/brokerd
boxctl=$target/release/boxctl
toolkit=$target/$MUSL/release/toolkit
# scripts/setup.sh mcp-client's venv (it names the same path).
venv=${MCP_VENV:-/var/cache/boxmaker-mcp/venv}
tree=$repo/build/tools-root-mcp-$$
work=/srv/boxmaker-mcp-$$

say() { printf 'mcp-test: %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { echo "mcp-test: run as root (it makes the service user and a network namespace)" >&2; exit 2; }

brokerd_pid=""
holder=""
cleanup() {
    set +e
    if [ -n "$brokerd_pid" ] && kill -0 "$brokerd_pid" 2>/dev/null; then
        kill -TERM "$brokerd_pid"
        for _ in $(seq 100); do kill -0 "$brokerd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$brokerd_pid" 2>/dev/null
    fi
    # unshare --fork ignores SIGTERM while it waits; --kill-child takes its sleep along.
    [ -n "$holder" ] && { kill -KILL "$holder"; wait "$holder"; } 2>/dev/null
    rm -rf "$work" "$tree"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${MCP_SKIP_SETUP:-}" != 1 ]; then
    scripts/setup.sh all
fi
scripts/setup.sh mcp-client
if [ "${MCP_SKIP_BUILD:-}" != 1 ]; then
    say "building brokerd, boxctl and the toolkit"
    cargo build --release --locked -p brokerd -p boxctl
    cargo build --release --locked --target $MUSL -p toolkit
fi
images/build-tools-image.sh --toolkit "$toolkit" --out "$tree" --tree-only

state=$work/state
install -d -m 0755 "$work" "$work/ro"
install -d -o boxmaker -g boxmaker -m 0755 "$work/rw" "$work/draft"
install -d -o boxmaker -g boxmaker -m 0750 "$state"
printf 'read through MCP\n' >"$work/ro/hello.txt"
chmod 0644 "$work/ro/hello.txt"
cat >"$state/brokerd.toml" <<CONF
# Written by tests/mcp/run.sh for one run.
[broker]
clients = [0]                        # the test's boxctl mcp runs as root
owners = [0]                         # and commits the staged grant's changes
audit_log = "$state/audit.jsonl"
timeout_ms = 60000
preview_chars = 2000                 # small, so that a few pages of output are cut
shutdown_grace_s = 5

[runner]
backend = "bwrap"
enforce_limits = false               # no cgroup v2 delegation here: rlimits only
shell_ms = 20000
read_file_ms = 10000
write_file_ms = 10000
http_fetch_ms = 20000

[bwrap]
tools_root = "$tree"

[grants.work]                        # auto: reads, writes and plain commands run
mode = "auto"
tools = ["read_file", "write_file", "shell", "http_fetch"]
paths = [ { path = "$work/rw", write = true }, { path = "$work/ro" } ]
hosts = ["docs.example.org"]

[grants.review]                      # ask: every change waits for the owner
mode = "ask"
tools = ["read_file", "write_file"]
paths = [ { path = "$work/rw", write = true } ]

[grants.draft]                       # staged: writes wait in a layer for the owner's commit
mode = "auto"
tools = ["read_file", "write_file", "shell"]
paths = [ { path = "$work/draft", write = true } ]
writes = "staged"
CONF
chown boxmaker:boxmaker "$state/brokerd.toml"
scripts/as-boxmaker "$brokerd" check-config "$state/brokerd.toml" >/dev/null

# One network namespace for brokerd and the client: only lo, so no packet leaves it. brokerd
# (as boxmaker) starts inside it and the client runs inside it; nsenter by the holder's pid.
say "starting brokerd (bwrap) in a network namespace with only lo"
unshare --net --fork --kill-child -- sleep infinity &
holder=$!
for _ in $(seq 50); do
    [ "$(readlink "/proc/$holder/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
    sleep 0.05
done
in_ns() { nsenter --net="/proc/$holder/ns/net" -- "$@"; }
in_ns ip link set lo up
socket=$state/broker.sock
# Not through in_ns: `&` on a shell function forks a subshell, and $! would name it rather than
# brokerd (nsenter, as-boxmaker and setpriv each exec the next, so $! here is brokerd).
BROKERD_LOG=info nsenter --net="/proc/$holder/ns/net" -- \
    "$repo/scripts/as-boxmaker" "$brokerd" --config "$state/brokerd.toml" \
    --socket "$socket" 2>"$state/brokerd.log" &
brokerd_pid=$!
for _ in $(seq 100); do
    "$boxctl" --socket "$socket" status >/dev/null 2>&1 && break
    kill -0 "$brokerd_pid" 2>/dev/null || { cat "$state/brokerd.log" >&2; exit 1; }
    sleep 0.1
done
"$boxctl" --socket "$socket" status >/dev/null

# A bound on the whole client: a hang is a failure, not a stuck CI job.
rc=0
in_ns timeout 240 "$venv/bin/python" tests/mcp/client.py --boxctl "$boxctl" --socket "$socket" \
    --work "$work" --audit "$state/audit.jsonl" || rc=$?

# What brokerd saw: still serving, the audit chain whole, no sandbox left behind.
if ! "$boxctl" --socket "$socket" status >/dev/null; then
    echo "FAIL brokerd no longer answers status" >&2
    rc=1
fi
if ! "$brokerd" audit verify "$state/audit.jsonl" >/dev/null; then
    echo "FAIL the audit chain does not verify" >&2
    rc=1
fi
left=$(pgrep -u boxmaker -x bwrap || true)
if [ -n "$left" ]; then
    echo "FAIL sandboxes left: $left" >&2
    rc=1
fi
if grep -q "panicked" "$state/brokerd.log"; then
    echo "FAIL brokerd panicked" >&2
    rc=1
fi
if [ "$rc" -ne 0 ]; then
    say "brokerd's log (last 30 lines):"
    tail -n 30 "$state/brokerd.log" >&2
fi
# Nothing of this run outlives it: brokerd and the namespace's holder are gone after clean-up.
pids="$brokerd_pid $holder $(pgrep -P "$holder" || true)"
cleanup
trap - EXIT
for pid in $pids; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "FAIL left running after the test: $(ps -o pid=,args= -p "$pid")" >&2
        rc=1
    fi
done
exit "$rc"
