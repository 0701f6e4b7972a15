#!/usr/bin/env bash
# Proves the test hosts' layout (hosts-net.sh) against pasta itself: pasta, started in a
# namespace laid out by hosts-net.sh, must configure its own namespace (the egress proxy's
# container, when Podman starts it) with no test host's address. pasta copies the addresses of
# the interface that holds the default route; a test host copied there would be the proxy
# container's own address, and a fetch of it would be answered by the container itself.
#
#   tests/e2e/pasta-layout.sh [--pasta FILE] [--netns NAME | --here]
#
# --netns NAME: check that namespace (in-netns.sh, where the suite's Podman runs pasta); --here:
# the namespace this runs in (the NixOS VM test's host, whose test hosts hosts-net.sh laid out).
# Without it: two namespaces of its own, removed on exit: one laid out by hosts-net.sh
# --gateway, which must pass, and one with the default route on the hosts' own interface (the
# layout before hosts-net.sh), which must fail, so the check is seen able to fail.
# --pasta: the program (default: `pasta` on PATH). pasta runs as `nobody` (it refuses root) and
# only configures its namespace and runs `ip addr` there: nothing is sent anywhere.
#
# Debian 12's passt (2023-03) copies the interface's first address; current passt (nl_addr_dup)
# copies every one. A layout whose default route's interface holds no test host at all passes
# both, and the self-test's failing layout fails both (its first address is a test host).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pasta=pasta
netns=""
here_ns=no
while [ $# -gt 0 ]; do
    case "$1" in
        --pasta) pasta=$2; shift 2 ;;
        --netns) netns=$2; shift 2 ;;
        --here) here_ns=yes; shift ;;
        *) echo "usage: $0 [--pasta FILE] [--netns NAME | --here]" >&2; exit 2 ;;
    esac
done
say() { printf 'pasta-layout: %s\n' "$*" >&2; }
command -v "$pasta" >/dev/null 2>&1 || { say "$pasta is not installed (Debian: apt-get install passt)"; exit 2; }
mapfile -t hosts < <("$here/hosts-net.sh" --list-hosts)

# The IPv4 addresses pasta gives its namespace when started in $1 ("" for this one), one per
# line.
pasta_addresses() {
    local in=()
    [ -z "$1" ] || in=(ip netns exec "$1")
    "${in[@]}" runuser -u nobody -- timeout 30 "$pasta" -q --config-net -- \
        ip -4 -o addr show 2>/dev/null | awk '$2 != "lo" {print $4}' | cut -d/ -f1
}

# 0 when pasta in $1 configured an address and none is a test host's; says what it saw.
check() {
    local got a where=${1:-this namespace}
    got=$(pasta_addresses "$1" | tr '\n' ' ')
    if [ -z "$got" ]; then
        say "$where: pasta configured no address (did it start?)"
        return 2
    fi
    for a in "${hosts[@]}"; do
        if [[ " $got " == *" $a "* ]]; then
            say "$where: pasta's namespace holds the test host $a (it holds: ${got% })"
            return 1
        fi
    done
    say "$where: pasta's namespace holds ${got% }, no test host"
}

if [ -n "$netns" ] || [ "$here_ns" = yes ]; then
    check "$netns"
    exit
fi

good=bxpasta-good-$$
bad=bxpasta-bad-$$
cleanup() { ip netns del "$good" 2>/dev/null; ip netns del "$bad" 2>/dev/null; true; }
trap cleanup EXIT
ip netns add "$good"
ip -n "$good" link set lo up
"$here/hosts-net.sh" --netns "$good" --gateway
check "$good"

# The layout before hosts-net.sh: hosts and default route on one interface (a veth pair with
# both ends in the namespace, so nothing leads out).
ip netns add "$bad"
ip -n "$bad" link set lo up
ip -n "$bad" link add bmx0 type veth peer name bmx0p
ip -n "$bad" link set bmx0 up
ip -n "$bad" link set bmx0p up
for a in "${hosts[@]}"; do ip -n "$bad" addr add "$a/32" dev bmx0; done
ip -n "$bad" route add 198.51.100.0/24 dev bmx0
ip -n "$bad" route add default via 198.51.100.254 dev bmx0
rc=0
check "$bad" || rc=$?
if [ "$rc" -ne 1 ]; then
    say "the self-test's layout, a default route on the test hosts' interface, was not caught (status $rc)"
    exit 1
fi
say "passed: the suite's layout gives pasta no test host; the old one is caught"
