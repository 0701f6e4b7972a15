#!/usr/bin/env bash
# boxmaker's setup for Debian 12 and other non-NixOS hosts. Idempotent: each step checks
# before it changes anything and says what it changed (a step that changed nothing says so).
#
#   scripts/setup.sh toolchain   Rust's musl target (the toolkit is static) and build packages
#   scripts/setup.sh packages    what brokerd and the tools image need at run time
#   scripts/setup.sh user        the service user `boxmaker` for rootless Podman: home,
#                                the clients' group boxmaker-clients, subordinate IDs, its Podman configuration (with a seccomp
#                                profile that denies nested user namespaces), lingering, a
#                                runtime directory
#   scripts/setup.sh all         toolchain, packages, user
#   scripts/setup.sh mcp-client  the official Python MCP SDK, pinned, in a venv kept in
#                                /var/cache/boxmaker-mcp/venv, or MCP_VENV (the client
#                                `make mcp-test` drives `boxctl mcp` with)
#   scripts/setup.sh undo        remove the service user with its files (its containers and
#                                images go with it), what `toolchain` added and the MCP
#                                client's venv; the packages
#                                stay: other software may use them
set -euo pipefail

# Packages the build and the tests need on a fresh Debian 12 machine (bubblewrap and
# busybox-static: the bwrap runner's tests run real sandboxes over a busybox root; passt: the
# suite proves its test hosts' layout against pasta, tests/e2e/pasta-layout.sh; git and make:
# the suite's toolset of the host's programs, and the repository it clones through the proxy).
BUILD_PACKAGES=(build-essential musl-tools pkg-config binutils bubblewrap busybox-static passt
    git make)
# What brokerd, rootless Podman on this kind of host and the no-Nix tools image need.
# containernetworking-plugins: without it (or netavark) podman's dependencies do not configure.
# jq derives the service user's seccomp profile from Podman's default (seccomp-nouserns.jq).
RUN_PACKAGES=(podman uidmap slirp4netns runc containernetworking-plugins fuse-overlayfs
    busybox-static curl iproute2 ca-certificates jq)

SERVICE_USER=boxmaker
SERVICE_HOME=/var/lib/boxmaker
# Who may connect to the socket (dist/systemd/boxmaker.socket's SocketGroup=): a group of its
# own, so that a client never shares the service user's group and its files.
CLIENT_GROUP=boxmaker-clients
# The service user's seccomp profile: Podman's default with nested user namespaces denied.
SECCOMP_PROFILE=$SERVICE_HOME/.config/containers/seccomp-nouserns.json
SECCOMP_FILTER=$(dirname "$0")/seccomp-nouserns.jq
# Subordinate IDs for the user's containers (the whole 16-bit range a container may use).
SUBID_COUNT=65536

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
        return 1
    fi
    need_root
    say "installing packages: $(echo $missing)"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

toolchain() {
    local changed=0
    install_packages "${BUILD_PACKAGES[@]}" && changed=1
    if ! command -v cargo >/dev/null 2>&1; then
        echo "setup: cargo is not on PATH; install Rust with rustup (Debian's rustc is too old)" >&2
        exit 1
    fi
    if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        say "adding the Rust target x86_64-unknown-linux-musl"
        rustup target add x86_64-unknown-linux-musl >/dev/null
        changed=1
    fi
    # make test runs `cargo fmt` and `cargo clippy`; a minimal rustup profile has neither.
    local component
    for component in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
            say "adding the Rust component $component"
            rustup component add "$component" >/dev/null
            changed=1
        fi
    done
    [ "$changed" = 1 ] || say "toolchain: nothing to change"
}

packages() {
    install_packages "${RUN_PACKAGES[@]}" || say "packages: nothing to change"
}

# --- the MCP test client ---------------------------------------------------------------------

# The official Python MCP SDK, pinned: a client of `boxctl mcp` that boxmaker did not write.
MCP_PY_VERSION=2.3.0
# Kept outside the clone, so that a fresh clone does not make it again; made again when it is
# missing or holds another version. tests/mcp/run.sh names the same path.
MCP_VENV=${MCP_VENV:-/var/cache/boxmaker-mcp/venv}
# Debian's own Python (its python3-venv makes the venv), whatever else is on PATH.
SYSTEM_PYTHON=/usr/bin/python3

mcp_client() {
    local changed=0 have
    install_packages python3 python3-venv && changed=1
    mkdir -p "$(dirname "$MCP_VENV")" 2>/dev/null && [ -w "$(dirname "$MCP_VENV")" ] || {
        echo "setup: cannot write the venv's directory $(dirname "$MCP_VENV"); run as root, or set MCP_VENV" >&2
        exit 1
    }
    # One run at a time changes the venv (two clones' suites may share it).
    exec 8>"$MCP_VENV.lock"
    flock 8
    # The version pip recorded, with the package importable: a venv that holds anything else
    # (another version, an install cut short) is made again, not patched.
    have=$("$MCP_VENV/bin/python" -c 'import importlib.metadata as m, mcp.client.stdio; print(m.version("mcp"))' 2>/dev/null || true)
    if [ "$have" != "$MCP_PY_VERSION" ]; then
        if [ -e "$MCP_VENV" ]; then
            say "the venv $MCP_VENV holds ${have:+mcp $have}${have:-no usable mcp}: making it again"
            rm -rf "$MCP_VENV"
        fi
        say "making the venv $MCP_VENV with the Python MCP SDK mcp==$MCP_PY_VERSION"
        "$SYSTEM_PYTHON" -m venv "$MCP_VENV"
        "$MCP_VENV/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
        changed=1
    fi
    exec 8>&-
    [ "$changed" = 1 ] || say "mcp-client: nothing to change (mcp $MCP_PY_VERSION in $MCP_VENV)"
}

# --- the service user ----------------------------------------------------------------------

systemd_is_init() { [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ]; }

# cgroup v2 alone ("unified") is the only layout where rootless containers get limits and crun
# works; on hybrid or v1 hosts Debian's crun fails to start containers, runc does not.
cgroup_v2_only() { [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; }

service_uid() { id -u "$SERVICE_USER"; }

runtime_dir() { echo "/run/user/$(service_uid)"; }

# Writes $2 to $1 (owned by the service user) unless it already holds exactly that; says so.
write_user_file() {
    local file=$1 content=$2
    if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then
        return 1
    fi
    runuser -u "$SERVICE_USER" -- mkdir -p "$(dirname "$file")"
    printf '%s\n' "$content" >"$file"
    chown "$SERVICE_USER:$SERVICE_USER" "$file"
    say "wrote $file"
}

# The first ID past every range in /etc/subuid and /etc/subgid, at least 100000.
next_subid_start() {
    cat /etc/subuid /etc/subgid 2>/dev/null |
        awk -F: 'BEGIN { n = 100000 } NF == 3 { e = $2 + $3; if (e > n) n = e } END { print n }'
}

add_subids() {
    local file=$1 start=$2
    if grep -q "^$SERVICE_USER:" "$file" 2>/dev/null || grep -q "^$(service_uid):" "$file" 2>/dev/null; then
        return 1
    fi
    echo "$SERVICE_USER:$start:$SUBID_COUNT" >>"$file"
    say "added $SERVICE_USER:$start:$SUBID_COUNT to $file"
}

# Whether the kernel lets an unprivileged user mount overlayfs in a user namespace (5.11+, and
# not on every backing file system): then Podman's native overlay driver works rootless.
native_overlay_works() {
    local t rc=1
    t=$(runuser -u "$SERVICE_USER" -- mktemp -d "$SERVICE_HOME/.overlay-probe.XXXXXX")
    runuser -u "$SERVICE_USER" -- mkdir "$t/l" "$t/u" "$t/w" "$t/m"
    if runuser -u "$SERVICE_USER" -- unshare --user --map-root-user --mount \
        mount -t overlay overlay -o "lowerdir=$t/l,upperdir=$t/u,workdir=$t/w" "$t/m" 2>/dev/null; then
        rc=0
    fi
    rm -rf "$t"
    return $rc
}

# The seccomp profile Podman applies by default on this host: the administrator's override if
# there is one, else the distribution's (golang-github-containers-common, a dependency of podman).
default_seccomp_profile() {
    local f
    for f in /etc/containers/seccomp.json /usr/share/containers/seccomp.json; do
        if [ -f "$f" ]; then
            echo "$f"
            return 0
        fi
    done
    echo "setup: no default seccomp profile (/etc/containers/seccomp.json or /usr/share/containers/seccomp.json); install podman" >&2
    return 1
}

# That profile with nested user namespaces denied (seccomp-nouserns.jq says how).
nouserns_profile() {
    local base
    if ! command -v jq >/dev/null 2>&1; then
        echo "setup: jq is missing; run scripts/setup.sh packages" >&2
        return 1
    fi
    base=$(default_seccomp_profile) || return 1
    jq -f "$SECCOMP_FILTER" "$base"
}

# Every command of the service user's Podman, from root: scripts/as-boxmaker.
as_user() { "$(dirname "$0")/as-boxmaker" "$@"; }

user() {
    need_root
    local changed=0 uid start conf engine storage driver_conf profile
    if ! id "$SERVICE_USER" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir "$SERVICE_HOME" --create-home \
            --shell /usr/sbin/nologin --comment "boxmaker broker" "$SERVICE_USER"
        say "created the system user $SERVICE_USER (home $SERVICE_HOME)"
        changed=1
    fi
    uid=$(service_uid)
    if ! getent group "$CLIENT_GROUP" >/dev/null; then
        groupadd --system "$CLIENT_GROUP"
        say "created the group $CLIENT_GROUP (add loopd's user to it: usermod -a -G $CLIENT_GROUP USER)"
        changed=1
    fi
    if [ ! -d "$SERVICE_HOME" ]; then
        install -d -o "$SERVICE_USER" -g "$SERVICE_USER" -m 0750 "$SERVICE_HOME"
        say "made $SERVICE_HOME"
        changed=1
    fi
    # Where egress directories live (docs/design.md#the-podman-runner: <home>/run/egress/).
    if [ ! -d "$SERVICE_HOME/run/egress" ]; then
        install -d -o "$SERVICE_USER" -g "$SERVICE_USER" -m 0700 "$SERVICE_HOME/run" "$SERVICE_HOME/run/egress"
        say "made $SERVICE_HOME/run/egress"
        changed=1
    fi
    touch /etc/subuid /etc/subgid
    start=$(next_subid_start)
    add_subids /etc/subuid "$start" && changed=1
    add_subids /etc/subgid "$start" && changed=1

    # Every container of the user gets the seccomp profile that denies nested user namespaces
    # (brokerd's argument lists stay as specified). Written before the configuration names it.
    profile=$(nouserns_profile) || exit 1
    write_user_file "$SECCOMP_PROFILE" "$profile" && changed=1
    conf="[containers]"
    conf+=$'\n# Podman\'s default seccomp profile with nested user namespaces denied (seccomp-nouserns.jq).'
    conf+=$'\nseccomp_profile = "'"$SECCOMP_PROFILE"'"'
    # No log file per container: a tool's output reaches brokerd only through the attached
    # stream, where the output cap applies, never also a file on disk that holds all of it until
    # the container is removed. ("passthrough" would hand brokerd's own pipes to the detached
    # egress proxy, which then holds them open.)
    conf+=$'\n# Output only through the attached stream, never to a log file on disk (BENCHMARKS.md).\nlog_driver = "none"'

    # Podman's engine settings for this host. Its events (five per call) are not read by
    # anything; brokerd's audit log is the record.
    engine=$'\n# Nothing reads Podman\'s events; brokerd\'s audit log is the record (BENCHMARKS.md).\nevents_logger = "none"'
    if ! cgroup_v2_only; then
        engine+=$'\n# This host has a hybrid or v1 cgroup hierarchy: crun fails there, runc works.\nruntime = "runc"'
    fi
    if ! systemd_is_init; then
        engine+=$'\n# No systemd: no user session to manage cgroups.\ncgroup_manager = "cgroupfs"'
    fi
    conf+=$'\n\n[engine]'"$engine"
    write_user_file "$SERVICE_HOME/.config/containers/containers.conf" "$conf" && changed=1

    # Storage: overlay, never the slow vfs, where the kernel allows.
    storage="$SERVICE_HOME/.config/containers/storage.conf"
    driver_conf=""
    if native_overlay_works; then
        driver_conf=$'[storage]\ndriver = "overlay"'
    elif command -v fuse-overlayfs >/dev/null 2>&1; then
        driver_conf=$'[storage]\ndriver = "overlay"\n\n[storage.options.overlay]\nmount_program = "/usr/bin/fuse-overlayfs"'
    fi
    if [ -n "$driver_conf" ]; then
        if [ -d "$SERVICE_HOME/.local/share/containers/storage" ] && ! grep -qs 'driver = "overlay"' "$storage"; then
            say "note: $SERVICE_USER's existing Podman storage was made with another driver; run 'scripts/as-boxmaker podman system reset' if podman complains"
        fi
        write_user_file "$storage" "$driver_conf" && changed=1
        # containers/storage records in the store that a mount program made its layers, and
        # then mounts every layer through it whatever storage.conf says (one Podman command
        # run with a stray mount_program is enough).
        if [[ "$driver_conf" != *mount_program* ]] &&
            [ "$(cat "$SERVICE_HOME/.local/share/containers/storage/overlay/.has-mount-program" 2>/dev/null)" = true ]; then
            say "note: $SERVICE_USER's Podman store was used with fuse-overlayfs and keeps using it, although native overlay works here; run 'scripts/as-boxmaker podman system reset' and load the tools image again (runbook/runner.md#podman-store-mount-program)"
        fi
    else
        say "note: neither native overlay nor fuse-overlayfs is available: Podman keeps its default storage driver"
    fi

    # Lingering keeps the user's runtime directory and services when nobody is logged in.
    if systemd_is_init; then
        if [ ! -e "/var/lib/systemd/linger/$SERVICE_USER" ]; then
            loginctl enable-linger "$SERVICE_USER"
            say "enabled lingering for $SERVICE_USER"
            changed=1
        fi
    fi
    # XDG_RUNTIME_DIR for running Podman as the user from root; systemd-logind makes it with
    # lingering, otherwise it is made here (and again by scripts/as-boxmaker after a reboot).
    if [ ! -d "$(runtime_dir)" ]; then
        install -d -m 0755 /run/user
        install -d -o "$SERVICE_USER" -g "$SERVICE_USER" -m 0700 "$(runtime_dir)"
        say "made $(runtime_dir)"
        changed=1
    fi
    # slirp4netns (the egress proxy's network on this kind of host) opens /dev/net/tun as the
    # service user. udev makes it 0666; a host without udev (a container, a minimal VM) may
    # have it 0600 or not at all.
    if [ ! -e /dev/net/tun ]; then
        install -d -m 0755 /dev/net
        mknod -m 0666 /dev/net/tun c 10 200
        say "made /dev/net/tun (0666, as udev makes it)"
        changed=1
    elif [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
        chmod 0666 /dev/net/tun
        say "made /dev/net/tun usable by every user (0666, as udev makes it)"
        changed=1
    fi
    # fuse-overlayfs (the storage where native overlay does not work, and a variant of the
    # Podman configuration bench) opens /dev/fuse as the service user: udev makes it 0666 too.
    if command -v fuse-overlayfs >/dev/null 2>&1 && [ -c /dev/fuse ] &&
        [ "$(stat -c %a /dev/fuse)" != 666 ]; then
        chmod 0666 /dev/fuse
        say "made /dev/fuse usable by every user (0666, as udev makes it)"
        changed=1
    fi
    if ! as_user podman info --format '{{.Store.GraphDriverName}} {{.Host.OCIRuntime.Name}}' >/dev/null 2>&1; then
        echo "setup: podman does not work as $SERVICE_USER; try: scripts/as-boxmaker podman info" >&2
        exit 1
    fi
    [ "$changed" = 1 ] || say "user: nothing to change"
    say "$SERVICE_USER's podman: $(as_user podman info --format 'storage {{.Store.GraphDriverName}}, runtime {{.Host.OCIRuntime.Name}}, cgroups {{.Host.CgroupsVersion}}, seccomp profile {{.Host.Security.SECCOMPProfilePath}}')"
}

undo_user() {
    if ! id "$SERVICE_USER" >/dev/null 2>&1; then
        return 1
    fi
    need_root
    local uid
    uid=$(service_uid)
    # Its containers, images and pause process first, so nothing holds its files.
    as_user podman system reset --force >/dev/null 2>&1 || true
    pkill_user_processes "$uid"
    if [ -e "/var/lib/systemd/linger/$SERVICE_USER" ]; then
        loginctl disable-linger "$SERVICE_USER" || true
        say "disabled lingering for $SERVICE_USER"
    fi
    sed -i "/^$SERVICE_USER:/d;/^$uid:/d" /etc/subuid /etc/subgid
    say "removed $SERVICE_USER's ranges from /etc/subuid and /etc/subgid"
    # Rootless storage holds files owned by subordinate IDs: remove them from inside.
    if [ -d "$SERVICE_HOME" ]; then
        rm -rf --one-file-system "$SERVICE_HOME"
        say "removed $SERVICE_HOME"
    fi
    if [ -d "/run/user/$uid" ] && ! systemd_is_init; then
        rm -rf --one-file-system "/run/user/$uid"
        say "removed /run/user/$uid"
    fi
    userdel "$SERVICE_USER"
    say "removed the user $SERVICE_USER"
    if getent group "$CLIENT_GROUP" >/dev/null; then
        groupdel "$CLIENT_GROUP"
        say "removed the group $CLIENT_GROUP"
    fi
}

# Processes of the service user (its Podman pause process, a brokerd started by hand), by the
# ids that /proc lists for that uid.
pkill_user_processes() {
    local uid=$1 pids
    pids=$(ps -o pid= -u "$uid" 2>/dev/null || true)
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill $pids 2>/dev/null || true
        sleep 1
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
        say "stopped $SERVICE_USER's processes: $(echo $pids)"
    fi
}

undo() {
    local changed=0
    undo_user && changed=1
    if [ -d "$MCP_VENV" ]; then
        say "removing the MCP test client's venv $MCP_VENV"
        rm -rf "$MCP_VENV" "$MCP_VENV.lock"
        rmdir "$(dirname "$MCP_VENV")" 2>/dev/null || true
        changed=1
    fi
    if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        say "removing the Rust target x86_64-unknown-linux-musl"
        rustup target remove x86_64-unknown-linux-musl >/dev/null
        changed=1
    fi
    [ "$changed" = 1 ] || say "undo: nothing to change"
}

case "${1:-}" in
    toolchain) toolchain ;;
    packages) packages ;;
    user) user ;;
    all)
        toolchain
        packages
        user
        ;;
    mcp-client) mcp_client ;;
    undo) undo ;;
    *)
        echo "usage: scripts/setup.sh toolchain | packages | user | all | mcp-client | undo" >&2
        exit 2
        ;;
esac
