#!/usr/bin/env bash
# The service user's Podman configuration, measured: `podman run` of the read_file argument list
# brokerd builds (crates/brokerd/tests/fixtures/podman/read_file.args, the golden file of the
# list in docs/design.md#the-tool-container) under each containers.conf / storage.conf choice that could matter on this host,
# side by side in one run (the variants take turns, call by call, so drift hits all alike).
# As root, after `scripts/setup.sh all`; the argument list is never changed, only the
# configuration Podman reads (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF).
#
#   scripts/bench-podman-conf.sh [N] [--json FILE]        (N calls per variant, default 30)
#
# Variants (each a whole containers.conf, as CONTAINERS_CONF makes Podman read that file alone;
# every one keeps the user's seccomp profile):
#   required         only what this host requires (runc on hybrid cgroups; cgroupfs and a file
#                    events log without systemd): Podman's defaults otherwise (the baseline)
#   setup            the user's containers.conf as scripts/setup.sh wrote it
#   events-none      [engine] events_logger = "none"
#   log-passthrough  [containers] log_driver = "passthrough" (stdio handed to the container)
#   log-none         [containers] log_driver = "none"
#   both             log-none and events-none together (what scripts/setup.sh chooses)
#   fuse-overlayfs   storage through fuse-overlayfs instead of the kernel's overlay, in a Podman
#                    state of its own (its own store, database and user namespace: a rootless
#                    Podman takes the graph root from the user's data directory, never from
#                    CONTAINERS_STORAGE_CONF, and a store once used with a mount program keeps
#                    using it)
#   runc, crun       [engine] runtime, each        (only where the cgroups are v2 alone: crun
#                                                  fails on hybrid ones)
#   systemd-cgroups  [engine] cgroup_manager = "systemd"  (only with a user systemd instance)
# A variant Podman refuses here is reported as such, with its error, and not timed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

n=30
json=""
while [ $# -gt 0 ]; do
    case "$1" in
        --json) json=$2; shift 2 ;;
        [0-9]*) n=$1; shift ;;
        *) echo "usage: $0 [N] [--json FILE]" >&2; exit 2 ;;
    esac
done

say() { printf 'bench-podman-conf: %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "run as root (it runs Podman as the service user)"; exit 2; }
id boxmaker >/dev/null 2>&1 || { say "no service user: run scripts/setup.sh all first"; exit 2; }
as_user() { "$repo/scripts/as-boxmaker" "$@"; }

home=$(getent passwd boxmaker | cut -d: -f6)
uid=$(id -u boxmaker)
user_conf=$home/.config/containers/containers.conf
user_storage=$home/.config/containers/storage.conf
[ -f "$user_conf" ] || { say "$user_conf is missing: run scripts/setup.sh user"; exit 2; }
profile=$(sed -n 's/^seccomp_profile = "\(.*\)"$/\1/p' "$user_conf")
[ -n "$profile" ] || { say "$user_conf names no seccomp profile"; exit 2; }

# The image: the tools image as setup builds it, imported into the user's store.
toolkit=target/x86_64-unknown-linux-musl/release/toolkit
[ -x "$toolkit" ] || cargo build --release --locked --target x86_64-unknown-linux-musl -p toolkit
image=$(images/build-tools-image.sh --toolkit "$toolkit" --out build/tools-root-bench \
    --name localhost/boxmaker-tools-bench | tail -n 1)

work=$(mktemp -d /var/tmp/boxmaker-bench-conf.XXXXXX)
chmod 0755 "$work"
# The fuse-overlayfs variant's own Podman state: its data directory (store and database) and
# its runtime directory (run root, locks, pause process), both made for this run.
fuse_run=/run/user/$uid/boxmaker-bench-fuse
fuse_env=(XDG_DATA_HOME="$work/fuse-data" XDG_RUNTIME_DIR="$fuse_run")

# The bench must leave the service user's Podman as it found it; the one mark a stray storage
# option leaves for good is its store's record of a mount program (containers/storage then
# mounts every layer through it, whatever storage.conf says).
graph_root=$(as_user podman info --format '{{.Store.GraphRoot}}')
store_mark() { cat "$graph_root/overlay/.has-mount-program" 2>/dev/null || echo absent; }
mark_before=$(store_mark)

finish() {
    local rc=$?
    set +e
    as_user podman rm -f -a --filter label=boxmaker=bench >/dev/null 2>&1
    if [ -d "$fuse_run" ]; then
        as_user env "${fuse_env[@]}" podman rm -f -a >/dev/null 2>&1
        # Its pause process holds its user namespace (and any fuse-overlayfs mount in it).
        as_user env "${fuse_env[@]}" podman system migrate >/dev/null 2>&1
        rm -rf "$fuse_run"
    fi
    rm -rf "$work"
    if [ "$(store_mark)" != "$mark_before" ]; then
        say "the bench changed $graph_root: its mount-program record was '$mark_before' and is '$(store_mark)'; run 'scripts/as-boxmaker podman system reset' and load the tools image again (runbook/runner.md#podman-store-mount-program)"
        rc=1
    fi
    exit "$rc"
}
trap finish EXIT
install -d -o boxmaker -g boxmaker -m 0755 "$work/notes" "$work/ref" "$work/conf" "$work/img"
echo "hello from the bench" >"$work/ref/hello.txt"
chown boxmaker:boxmaker "$work/ref/hello.txt"

# --- the variants ----------------------------------------------------------------------------
# What the host requires, as setup decides it (scripts/setup.sh user).
runtime=""
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || runtime=runc
cgroup_manager=""
events_logger=""
if [ "$(ps -p 1 -o comm=)" != systemd ]; then
    cgroup_manager=cgroupfs
    events_logger=file
fi
conf() { # NAME [containers-lines] [engine-overrides as key=value]...
    local name=$1 containers=$2 rt=$runtime cm=$cgroup_manager ev=$events_logger
    shift 2
    for kv in "$@"; do
        case "$kv" in
            runtime=*) rt=${kv#*=} ;;
            cgroup_manager=*) cm=${kv#*=} ;;
            events_logger=*) ev=${kv#*=} ;;
        esac
    done
    {
        printf '[containers]\nseccomp_profile = "%s"\n%s\n[engine]\n' "$profile" "$containers"
        [ -n "$rt" ] && printf 'runtime = "%s"\n' "$rt"
        [ -n "$cm" ] && printf 'cgroup_manager = "%s"\n' "$cm"
        [ -n "$ev" ] && printf 'events_logger = "%s"\n' "$ev"
        :
    } >"$work/conf/$name.conf"
}
variants=(required setup events-none log-passthrough log-none both fuse-overlayfs)
conf required ""
cp "$user_conf" "$work/conf/setup.conf"
conf events-none "" events_logger=none
conf log-passthrough 'log_driver = "passthrough"'
conf log-none 'log_driver = "none"'
conf both 'log_driver = "none"' events_logger=none
conf fuse-overlayfs ""
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    conf runc "" runtime=runc
    conf crun "" runtime=crun
    variants+=(runc crun)
fi
if [ -S "/run/user/$uid/bus" ] && [ "$cgroup_manager" != systemd ]; then
    conf systemd-cgroups "" cgroup_manager=systemd
    variants+=(systemd-cgroups)
fi
# Storage: the user's own for all but fuse-overlayfs, which gets a Podman state of its own (see
# above) with the image loaded into it (same image ID: the ID is the config's digest).
cp "$user_storage" "$work/conf/user-storage.conf" 2>/dev/null || printf '[storage]\ndriver = "overlay"\n' >"$work/conf/user-storage.conf"
printf '[storage]\ndriver = "overlay"\n\n[storage.options.overlay]\nmount_program = "/usr/bin/fuse-overlayfs"\n' \
    >"$work/conf/fuse-storage.conf"
install -d -o boxmaker -g boxmaker -m 0700 "$work/fuse-data" "$fuse_run"
chown -R boxmaker:boxmaker "$work/conf"

storage_of() { [ "$1" = fuse-overlayfs ] && echo "$work/conf/fuse-storage.conf" || echo "$work/conf/user-storage.conf"; }
podman_as() { # VARIANT ARGS...
    local v=$1
    shift
    local own=()
    [ "$v" != fuse-overlayfs ] || own=("${fuse_env[@]}")
    as_user env "${own[@]}" CONTAINERS_CONF="$work/conf/$v.conf" CONTAINERS_STORAGE_CONF="$(storage_of "$v")" podman "$@"
}

if [ -x /usr/bin/fuse-overlayfs ]; then
    as_user podman save --format oci-archive -o "$work/img/image.tar" "$image" >/dev/null
    podman_as fuse-overlayfs load -i "$work/img/image.tar" >/dev/null
    # The variant's store is its own, or the bench stops here having touched nothing else.
    fuse_root=$(podman_as fuse-overlayfs info --format '{{.Store.GraphRoot}}')
    case "$fuse_root" in
        "$work/fuse-data/"*) ;;
        *) say "the fuse-overlayfs variant's store is $fuse_root, not under $work/fuse-data"; exit 1 ;;
    esac
else
    say "no /usr/bin/fuse-overlayfs: that variant is left out"
    variants=("${variants[@]/fuse-overlayfs/}")
fi

# The argument list: the golden file with this run's name, mounts and image.
mapfile -t golden <crates/brokerd/tests/fixtures/podman/read_file.args
args_for() { # CALL-NUMBER
    local a
    for a in "${golden[@]}"; do
        case "$a" in
            --name=*) echo "--name=boxmaker-bench-c$1" ;;
            --label=*) echo "--label=boxmaker=bench" ;;
            --volume=/srv/notes:*) echo "--volume=$work/notes:$work/notes:ro" ;;
            --volume=/srv/ref:*) echo "--volume=$work/ref:$work/ref:ro" ;;
            *@sha256:*) echo "$image" ;;
            *) echo "$a" ;;
        esac
    done
}
input="{\"path\":\"$work/ref/hello.txt\"}"

# --- each variant works here, or is reported and dropped ----------------------------------------
declare -A refused
timed=()
for v in "${variants[@]}"; do
    [ -n "$v" ] || continue
    mapfile -t a < <(args_for 0)
    if out=$(printf '%s' "$input" | podman_as "$v" "${a[@]}" 2>"$work/err") && [ "$out" = "hello from the bench" ]; then
        timed+=("$v")
    else
        refused[$v]=$(cat "$work/err" - <<<"$out" | grep -v 'Resource limits are not supported' | tr '\n' ' ' | cut -c1-200)
    fi
done

# --- timed, variants taking turns --------------------------------------------------------------
declare -A ms
for i in $(seq 1 "$n"); do
    for v in "${timed[@]}"; do
        mapfile -t a < <(args_for "$i")
        t0=$(date +%s%N)
        printf '%s' "$input" | podman_as "$v" "${a[@]}" >/dev/null 2>&1 || { say "$v: call $i failed"; continue; }
        t1=$(date +%s%N)
        ms[$v]+="$(((t1 - t0) / 1000)) "
    done
done

# --- the table ---------------------------------------------------------------------------------
what_of() { # VARIANT -> what it changes, for the JSON (BENCHMARKS.md's table)
    case "$1" in
        required) echo "only what the host needs: runtime ${runtime:-default}, cgroup manager ${cgroup_manager:-default}, events logger ${events_logger:-default}" ;;
        setup) echo 'what `scripts/setup.sh` writes (the `both` set)' ;;
        events-none) echo '`[engine] events_logger = "none"`' ;;
        log-passthrough) echo '`[containers] log_driver = "passthrough"`' ;;
        log-none) echo '`[containers] log_driver = "none"`' ;;
        both) echo "log-none and events-none" ;;
        fuse-overlayfs) echo "storage through fuse-overlayfs instead of the kernel's overlay" ;;
        runc | crun) echo "\`[engine] runtime = \"$1\"\`" ;;
        systemd-cgroups) echo '`[engine] cgroup_manager = "systemd"`' ;;
    esac
}
jstr() { printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
pct() { # P VALUES... (microseconds) -> milliseconds with one decimal
    local p=$1
    shift
    printf '%s\n' "$@" | sort -n | awk -v p="$p" '{ v[NR] = $1 } END { i = int((NR - 1) * p / 100) + 1; printf "%.1f", v[i] / 1000 }'
}
base=""
printf '%-16s %9s %9s %9s\n' variant "p50 ms" "p95 ms" "vs base"
rows=()
for v in "${timed[@]}"; do
    # shellcheck disable=SC2086
    p50=$(pct 50 ${ms[$v]})
    # shellcheck disable=SC2086
    p95=$(pct 95 ${ms[$v]})
    [ -n "$base" ] || base=$p50
    ratio=$(awk -v a="$p50" -v b="$base" 'BEGIN { printf "%.3f", a / b }')
    printf '%-16s %9s %9s %9s\n' "$v" "$p50" "$p95" "$ratio"
    rows+=("{\"variant\":\"$v\",\"what\":$(jstr "$(what_of "$v")"),\"p50_ms\":$p50,\"p95_ms\":$p95,\"vs_required\":$ratio}")
done
for v in "${!refused[@]}"; do
    printf '%-16s refused here: %s\n' "$v" "${refused[$v]}"
    rows+=("{\"variant\":\"$v\",\"what\":$(jstr "$(what_of "$v")"),\"refused\":$(printf '%s' "${refused[$v]}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}")
done
say "$n calls per variant; podman $(as_user podman version --format '{{.Client.Version}}'), runtime ${runtime:-default}, cgroup manager ${cgroup_manager:-default}, cgroups $(stat -fc %T /sys/fs/cgroup)"
if [ -n "$json" ]; then
    (IFS=,; printf '{"bench":"podman-conf","calls":%s,"variants":[%s]}\n' "$n" "${rows[*]}") >"$json"
fi
