#!/usr/bin/env bash
# boxmaker's setup for Debian 12 and other non-NixOS hosts. Idempotent: each step checks
# before it changes anything and says what it changed.
#
#   scripts/setup.sh toolchain   Rust's musl target (the toolkit is static) and build packages
#   scripts/setup.sh undo        remove what `toolchain` added (the packages stay: other
#                                software may use them)
set -euo pipefail

# Packages the build and the tests need on a fresh Debian 12 machine.
BUILD_PACKAGES=(build-essential musl-tools pkg-config binutils)

say() { printf 'setup: %s\n' "$*"; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: this step changes the system; run it as root" >&2
        exit 1
    fi
}

missing_packages() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

install_packages() {
    local missing
    missing=$(missing_packages "$@")
    if [ -z "$missing" ]; then
        return 0
    fi
    need_root
    say "installing packages: $(echo $missing)"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

toolchain() {
    install_packages "${BUILD_PACKAGES[@]}"
    if ! command -v cargo >/dev/null 2>&1; then
        echo "setup: cargo is not on PATH; install Rust with rustup (Debian's rustc is too old)" >&2
        exit 1
    fi
    if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        say "adding the Rust target x86_64-unknown-linux-musl"
        rustup target add x86_64-unknown-linux-musl >/dev/null
    fi
}

undo() {
    if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        say "removing the Rust target x86_64-unknown-linux-musl"
        rustup target remove x86_64-unknown-linux-musl >/dev/null
    fi
}

case "${1:-}" in
    toolchain) toolchain ;;
    undo) undo ;;
    *)
        echo "usage: scripts/setup.sh toolchain | undo" >&2
        exit 2
        ;;
esac
