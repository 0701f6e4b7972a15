#!/usr/bin/env bash
# The test hosts' addresses, laid out in a network namespace (or the current one): the one
# layout of tests/e2e/in-netns.sh (CI, the QEMU guest) and of the NixOS VM test's test hosts, so
# that both give pasta the same thing to copy.
#
#   tests/e2e/hosts-net.sh [--netns NAME] [--gateway | --gateway-if-none] [--veth]
#   tests/e2e/hosts-net.sh --list-hosts      the test hosts' addresses, one per line
#
# The hosts (192.0.2.1 ok.test, 192.0.2.2 other.test, 192.0.2.53 the nameserver,
# 100.100.100.100 the fake tailnet host) sit on `bmx0`: a dummy interface, or a veth pair with
# both ends in the namespace where the kernel has no dummy module (--veth asks for that), or,
# without either and without a gateway, the namespace's own lo.
#
# pasta (the egress proxy's network where Podman has it) copies every address and the routes of
# the interface that holds the default route into the proxy's container. An address copied
# there is the container's own: a fetch of a test host whose address was copied would reach the
# container itself and be refused. So the default route, where pasta needs one (--gateway; with
# --gateway-if-none only where the namespace has none yet), goes to a gateway on an interface
# of its own, `bmx-gw` (198.51.100.1/24, TEST-NET-2, via 198.51.100.254, which does not
# exist): nothing pasta copies is a test host. The interface drops or keeps what is sent to it,
# so the route leads nowhere and no packet leaves the namespace.
#
# Last, whatever made the namespace, the interface that holds the default route is checked to
# hold no test host's address; the script fails if it does (docs/design.md#testing).
set -euo pipefail

HOSTS=(192.0.2.1 192.0.2.2 192.0.2.53 100.100.100.100)
GATEWAY_ADDR=198.51.100.1/24
GATEWAY_VIA=198.51.100.254

netns=""
gateway=no
veth=no
usage="usage: $0 [--netns NAME] [--gateway | --gateway-if-none] [--veth]"
while [ $# -gt 0 ]; do
    case "$1" in
        --netns) netns=$2; shift 2 ;;
        --gateway) gateway=yes; shift ;;
        --gateway-if-none) gateway=if-none; shift ;;
        --veth) veth=yes; shift ;;
        --list-hosts) printf '%s\n' "${HOSTS[@]}"; exit 0 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
ipn() { ip ${netns:+-n "$netns"} "$@"; }
say() { printf 'hosts-net: %s\n' "$*" >&2; }

# An interface named $1 that keeps what is sent to it inside the namespace: a dummy, or a veth
# pair with both ends here.
make_dev() {
    if ipn link show "$1" >/dev/null 2>&1; then
        :
    elif [ "$veth" = no ] && ipn link add "$1" type dummy 2>/dev/null; then
        :
    else
        ipn link add "$1" type veth peer name "$1p"
        ipn link set "$1p" up
    fi
    ipn link set "$1" up
}

has_default() { ipn route show default | grep -q .; }

if [ "$gateway" = yes ] && has_default; then
    say "the namespace already has a default route; refusing to lay the test hosts out there"
    exit 2
fi
want_gateway=no
if [ "$gateway" = yes ] || { [ "$gateway" = if-none ] && ! has_default; }; then
    want_gateway=yes
fi

# The hosts' interface: lo only where nothing else can be made and pasta needs nothing.
dev=bmx0
if ! ipn link show "$dev" >/dev/null 2>&1 && [ "$veth" = no ] &&
    ! ipn link add "$dev" type dummy 2>/dev/null; then
    if [ "$want_gateway" = yes ]; then
        veth=yes
    else
        dev=lo
    fi
fi
[ "$dev" = lo ] || make_dev "$dev"
for a in "${HOSTS[@]}"; do
    ipn addr replace "$a/32" dev "$dev"
done

if [ "$want_gateway" = yes ]; then
    make_dev bmx-gw
    ipn addr replace "$GATEWAY_ADDR" dev bmx-gw
    ipn route replace default via "$GATEWAY_VIA" dev bmx-gw
fi

# The guard: no test host on the interface pasta copies.
route_dev=$(ipn route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
if [ -n "$route_dev" ]; then
    held=$(ipn -o -4 addr show dev "$route_dev" | awk '{print $4}' | cut -d/ -f1)
    for a in "${HOSTS[@]}"; do
        if printf '%s\n' "$held" | grep -qxF "$a"; then
            say "the default route's interface $route_dev holds the test host $a: pasta would copy it into the proxy's container, which would then refuse the fetch itself"
            exit 1
        fi
    done
fi
say "test hosts on $dev${route_dev:+, default route on $route_dev}"
