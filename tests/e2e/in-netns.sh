#!/usr/bin/env bash
# The end-to-end suite's run, given what it runs (as root): a network namespace with the suite's
# own hosts, `boxmaker-e2e serve` in it, then `boxmaker-e2e run` against a real brokerd inside
# it, once per backend. Each run prints `<backend>: N passed, M failed`; the last line is the
# total, `N passed, M failed`; the status is 0 only when every backend's run passed: it exited
# 0 and its summary says 0 failed (a run without a summary fails; suite-tally.sh). Used by
# tests/e2e/run.sh (CI on Debian, after its builds) and by the NixOS VM test (vm-tests/e2e.nix,
# with Nix store paths), so both run the same suite in the same topology.
#
# The namespace has no route out: only lo and the interface holding the test hosts' addresses
# (192.0.2.1 ok.test, 192.0.2.2 other.test, 192.0.2.53 the nameserver, 100.100.100.100 the fake
# tailnet host), laid out by hosts-net.sh beside this file; for pasta also a default route onto
# an interface of its own, which leads nowhere. slirp4netns or pasta, started by Podman inside
# it, connects from inside it too, so no packet of the suite leaves it. Everything made here is removed on
# exit, whatever happens, and so is every container of the service user labelled boxmaker (the
# image stays: it is the caller's).
#
#   tests/e2e/in-netns.sh --e2e FILE --brokerd FILE --ca DIR --work DIR [--image ID]
#                         [--tools-root DIR] [--backends "podman bwrap"] [--files DIR]
#                         [-- RUN-ARG...]
#
# --work must not exist yet (it is made here and removed on exit). --image is needed for
# podman, --tools-root for bwrap. --files DIR: the test hosts serve DIR's files at
# https://ok.test/files/ (run.sh's repository for the toolset scenarios to clone). The RUN-ARGs go to every `boxmaker-e2e run` (--only NAME,
# --bench N, --enforce-limits true, --time-scale N, ...). The service user's commands go through
# scripts/as-boxmaker beside this file in the repository layout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
as_boxmaker=$here/../../scripts/as-boxmaker
e2e=""
brokerd=""
ca=""
work=""
image=""
tree=""
backends="podman bwrap"
files=""
usage="usage: $0 --e2e FILE --brokerd FILE --ca DIR --work DIR [--image ID] [--tools-root DIR] [--backends LIST] [--files DIR] [-- RUN-ARG...]"
while [ $# -gt 0 ]; do
    case "$1" in
        --e2e) e2e=$2; shift 2 ;;
        --brokerd) brokerd=$2; shift 2 ;;
        --ca) ca=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --image) image=$2; shift 2 ;;
        --tools-root) tree=$2; shift 2 ;;
        --backends) backends=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
[ -n "$e2e" ] && [ -n "$brokerd" ] && [ -n "$ca" ] && [ -n "$work" ] || { echo "$usage" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "e2e: run as root (it makes a network namespace)" >&2; exit 2; }
[ ! -e "$work" ] || { echo "e2e: $work exists; give a new directory" >&2; exit 2; }

ns=bmx-e2e-$$
serve_pid=""
say() { printf 'e2e: %s\n' "$*" >&2; }
as_user() { "$as_boxmaker" "$@"; }

cleanup() {
    set +e
    for b in $backends; do
        if [ -f "$work/$b/state/brokerd.pid" ]; then
            kill -9 "$(cat "$work/$b/state/brokerd.pid")" 2>/dev/null
        fi
    done
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    if id boxmaker >/dev/null 2>&1; then
        ids=$(as_user podman ps -aq --filter label=boxmaker 2>/dev/null)
        [ -n "$ids" ] && as_user podman rm -f $ids >/dev/null 2>&1
        as_user podman rm -f boxmaker-e2e-control >/dev/null 2>&1
        find /var/lib/boxmaker/run/egress -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null
        # The staged layers of this run's directories (layers outlive brokerd by design); what
        # Podman's overlays left owned by a subordinate uid goes through podman unshare.
        for layer in $(grep -l "\"$work/" /var/lib/boxmaker/staged/*/d-*/layer.json 2>/dev/null); do
            d=$(dirname "$layer")
            rm -rf "$d" 2>/dev/null || as_user podman unshare rm -rf "$d" >/dev/null 2>&1
        done
        find /var/lib/boxmaker/staged -mindepth 1 -maxdepth 1 -type d -empty -delete 2>/dev/null
        # The user's Podman pause process was started inside the namespace (and would keep it
        # and its resolv.conf): stop it, Podman starts a fresh one on its next command.
        as_user podman system migrate >/dev/null 2>&1
    fi
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns" "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

install -d -m 0755 "$work"

say "network namespace $ns"
ip netns add "$ns"
ip -n "$ns" link set lo up
# The egress proxy's network, as `boxmaker-e2e run` picks it (pasta where this host's Podman has
# it, as on NixOS; slirp4netns otherwise).
egress_network=""
case " $backends " in
    *" podman "*)
        egress_network=$("$e2e" egress-network)
        say "egress network $egress_network"
        ;;
esac
# The test hosts, and for pasta a default route on an interface of its own (hosts-net.sh says
# why: pasta copies that interface's addresses into the proxy's container).
layout=(--netns "$ns")
[ "$egress_network" != pasta ] || layout+=(--gateway)
"$here/hosts-net.sh" "${layout[@]}"
if [ "$egress_network" = pasta ]; then
    # The layout proved against the pasta this Podman runs (on NixOS, a current passt that
    # copies every address of the default route's interface).
    pasta_exe=$("$e2e" egress-network --program true)
    "$here/pasta-layout.sh" --pasta "$pasta_exe" --netns "$ns"
fi
install -d "/etc/netns/$ns"
echo "nameserver 192.0.2.53" >"/etc/netns/$ns/resolv.conf"

# Becomes a command in the namespace with its resolv.conf. Not `ip netns exec`: that remounts
# /sys, which hides /sys/fs/cgroup, and runc then cannot create a container.
exec_in_ns() {
    exec nsenter --net="/run/netns/$ns" unshare --mount --propagation private -- \
        sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"' "/etc/netns/$ns/resolv.conf" "$@"
}

(exec_in_ns "$e2e" serve --ca "$ca" \
    --https 192.0.2.1:443 --https 192.0.2.2:443 --dns 192.0.2.53:53 --dns-log "$work/dns.log" \
    --tailnet 100.100.100.100:80 --tailnet 100.100.100.100:443 \
    --tailnet-log "$work/tailnet.log" ${files:+--files "$files"} --ready "$work/ready") &
serve_pid=$!
for _ in $(seq 100); do
    [ -f "$work/ready" ] && break
    sleep 0.1
done
[ -f "$work/ready" ] || { echo "e2e: the test hosts did not start" >&2; exit 2; }

# The user's Podman must set up its namespaces from inside this one (resolv.conf above).
as_user podman system migrate >/dev/null 2>&1 || true

# One `boxmaker-e2e run` per backend in the namespace; suite-tally.sh counts them and fails on
# a run with a failed scenario or without a summary.
run_args=("$@")
run_backend() {
    exec_in_ns "$e2e" run --backend "$1" --brokerd "$brokerd" ${image:+--image "$image"} \
        ${tree:+--tools-root "$tree"} ${egress_network:+--egress-network "$egress_network"} \
        --work "$work/$1" --tailnet-log "$work/tailnet.log" --dns-log "$work/dns.log" ${run_args[@]+"${run_args[@]}"}
}
. "$here/suite-tally.sh"
run_suites
