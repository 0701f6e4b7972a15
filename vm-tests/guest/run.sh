#!/usr/bin/env bash
# The guest test: boxmaker on a host like the real one, under QEMU. A Debian 12 guest
# with systemd as PID 1 and cgroup v2, rootless Podman with its limits enforced, brokerd
# socket-activated from the dist/systemd/ units, and the checks of `boxmaker-e2e guest`
# (tests/e2e/src/guest/, which ends with a smoke pass of the end-to-end suite on each
# backend), started by in-guest.sh. The guest has no network device at all.
#
#   vm-tests/guest/run.sh [--no-cache] [--keep]
#
# As root, on Debian 12 with only the package registries reachable. Steps:
#   1. host packages (qemu, debootstrap, the kernel the guest boots);
#   2. the guest's root image: build-image.sh, cached under $CACHE_DIR/<key> where the key hashes
#      build-image.sh, the kernel and the mirror (--no-cache builds a fresh one in the work
#      directory and leaves the cache alone);
#   3. the payload disk, made anew each run: this build's binaries (boxmaker-e2e, which holds
#      the checks, among them), the tools image builder, setup.sh, the units, in-guest.sh; the
#      guest writes its results and journal back onto it;
#   4. QEMU (KVM only when the CPU has vmx/svm and a probe boot works; TCG otherwise), the root
#      image with snapshot=on so it stays clean;
#   5. the results: each `ok`/`FAIL`/`skip` line, the timings, exit 0 only when all passed.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

# --- integration points: what this run puts into the guest ----------------------------------
BROKERD=${BROKERD:-$REPO/target/release/brokerd}
BOXCTL=${BOXCTL:-$REPO/target/release/boxctl}
TOOLKIT=${TOOLKIT:-$REPO/target/x86_64-unknown-linux-musl/release/toolkit}
# The guest's checks and the scenario suite (tests/e2e: `boxmaker-e2e guest`), static.
E2E_BIN=${E2E_BIN:-$REPO/target/x86_64-unknown-linux-musl/release/boxmaker-e2e}
# The scripts the guest runs, copied whole with the paths they have here, so a script that calls
# another beside it (build-tools-image.sh its program check, in-netns.sh hosts-net.sh, setup.sh
# its seccomp filter) finds it in the guest as it does here: the tools image builder (images/),
# setup and its helpers (scripts/), and the scripts that run the scenario suite in its own
# network namespace (tests/e2e/*.sh).
SOURCE_DIRS=(images scripts)
SOURCE_GLOBS=("tests/e2e/*.sh")
# The socket and service units; the guest falls back to in-guest stand-ins when absent.
UNITS_DIR=${UNITS_DIR:-$REPO/dist/systemd}

# --- the machine -----------------------------------------------------------------------------
HOST_PACKAGES=(qemu-system-x86 debootstrap linux-image-amd64 e2fsprogs)
CACHE_DIR=${BOXMAKER_GUEST_CACHE:-/var/cache/boxmaker-guest}
GUEST_CPUS=${GUEST_CPUS:-2}
GUEST_MEM=${GUEST_MEM:-2048}
# The whole guest run, boot to power-off, before QEMU is stopped.
GUEST_TIMEOUT=${GUEST_TIMEOUT:-2700}

no_cache=0
keep=0
for a in "$@"; do
    case "$a" in
        --no-cache) no_cache=1 ;;
        --keep) keep=1 ;;
        *) echo "usage: $0 [--no-cache] [--keep]" >&2; exit 2 ;;
    esac
done

say() { printf 'guest-test: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

[ "$(id -u)" -eq 0 ] || die "run as root: it installs packages and builds a root file system"

t_all=$(now)

# --- 1. host packages ------------------------------------------------------------------------
missing=()
for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    t=$(now)
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    say "timing host-packages $(since "$t")s"
fi

# The newest installed kernel that has its initrd and modules.
kver=""
for v in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V); do
    [ -f "/boot/initrd.img-$v" ] && [ -d "/lib/modules/$v" ] && kver=$v
done
[ -n "$kver" ] || die "no /boot/vmlinuz-<ver> with its initrd and /lib/modules/<ver>; install linux-image-amd64"
kernel=/boot/vmlinuz-$kver
initrd=/boot/initrd.img-$kver

# The Debian mirror apt already uses (deb822 or one-line sources), else the default.
mirror=$(
    { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{ print $2 }'
      grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{ print ($2 ~ /^\[/) ? $3 : $2 }'; } |
        grep -E '/debian/?$' | head -n 1
) || true
mirror=${mirror:-http://deb.debian.org/debian}

for f in "$BROKERD" "$BOXCTL" "$TOOLKIT" "$E2E_BIN"; do
    [ -x "$f" ] || die "$f is missing; build it first (make guest-test does)"
done

work=$(mktemp -d /var/tmp/boxmaker-guest.XXXXXX)
qemu_pid=""
cleanup() {
    [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null || true
    if [ "$keep" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# --- 2. the root image -----------------------------------------------------------------------
key=$( { sha256sum "$HERE/build-image.sh" | cut -d' ' -f1; echo "$kver"
         sha256sum "$kernel" | cut -d' ' -f1; echo "$mirror"; } | sha256sum | cut -c1-16)
t=$(now)
image_state=cached
if [ "$no_cache" = 1 ]; then
    image=$work/root.img
    "$HERE/build-image.sh" "$kver" "$mirror" "$image"
    image_state=built
else
    image=$CACHE_DIR/$key/root.img
    if [ ! -f "$image" ]; then
        mkdir -p "$CACHE_DIR/$key"
        "$HERE/build-image.sh" "$kver" "$mirror" "$CACHE_DIR/$key/.root.img.new" "$CACHE_DIR/debs"
        mv "$CACHE_DIR/$key/.root.img.new" "$image"
        image_state=built
        # Images made from other inputs are of no further use.
        for d in "$CACHE_DIR"/*/; do
            [ "$d" = "$CACHE_DIR/$key/" ] || [ "$d" = "$CACHE_DIR/debs/" ] || rm -rf "$d"
        done
    fi
fi
t_image=$(since "$t")
say "timing image ${t_image}s ($image_state: $image, kernel $kver)"

# --- 3. the payload disk ---------------------------------------------------------------------
t=$(now)
p=$work/payload
mkdir -p "$p/bin" "$p/src/images" "$p/src/scripts" "$p/src/tests/e2e" "$p/units" "$p/results"
install -m 0755 "$BROKERD" "$BOXCTL" "$TOOLKIT" "$E2E_BIN" "$p/bin/"
install -m 0755 "$HERE/in-guest.sh" "$p/in-guest.sh"
for d in "${SOURCE_DIRS[@]}"; do
    cp -a "$REPO/$d/." "$p/src/$d/"
done
for g in "${SOURCE_GLOBS[@]}"; do
    # shellcheck disable=SC2086 # the glob is meant to expand
    for f in "$REPO"/$g; do
        install -D -m "$(stat -c %a "$f")" "$f" "$p/src/${f#"$REPO"/}"
    done
done
if [ -d "$UNITS_DIR" ] && ls "$UNITS_DIR"/*.socket >/dev/null 2>&1; then
    cp -r "$UNITS_DIR"/. "$p/units/"
    say "units from $UNITS_DIR: $(cd "$p/units" && echo *)"
else
    say "no units in $UNITS_DIR: the guest uses its stand-in units and says so"
fi
# The scenarios the guest runs of the suite: a smoke pass of each backend, of those whose
# answer depends on what only the guest has (its own kernel, systemd and cgroup v2 with the
# limits enforced, crun): each of the four tools in a sandbox, a sandbox with no network at
# all, no nested user namespace and a staged commit through the guest kernel's overlay;
# sigterm-stops-cleanly always runs last. A stop's kill and removal and a crash swept by the
# restart are the guest's own checks, under systemd (stop-leaves-nothing, crash-sweep,
# bwrap-crash). What the egress proxy, the classifier and brokerd's own logic answer
# (refusals, the tailnet, output caps, the time limit, conflicts, crashes at other moments, a
# burst) is the same on any host: the host's `make e2e` and the NixOS VM test
# (vm-tests/e2e.nix) run those on both backends. GUEST_E2E_ARGS set (even empty) replaces
# this list: GUEST_E2E_ARGS= runs the whole suite in the guest.
smoke="read_file-works write_file-works shell-works http_fetch-works shell-has-no-network
no-nested-user-namespaces staged-commit-lands-what-the-sandbox-saw"
smoke_args=""
for s in $smoke; do smoke_args="$smoke_args --only $s"; done
# What the guest's checks take from this run's environment.
{
    printf 'E2E=%q\n' "${GUEST_E2E:-1}"
    printf 'E2E_TIME_SCALE=%q\n' "${GUEST_E2E_TIME_SCALE:-5}"
    printf 'E2E_ARGS=%q\n' "${GUEST_E2E_ARGS-$smoke_args}"
    # Which backends the suite runs on in the guest (both unless told otherwise).
    printf 'E2E_BACKENDS=%q\n' "${GUEST_E2E_BACKENDS:-podman bwrap}"
} >"$p/guest.env"
payload=$work/payload.img
truncate -s "$(( $(du -sm "$p" | cut -f1) + 512 ))M" "$payload"
mkfs.ext4 -q -F -L bxpayload -d "$p" "$payload"
say "timing payload $(since "$t")s"

# --- 4. QEMU ---------------------------------------------------------------------------------
append="console=ttyS0 root=LABEL=root rw panic=-1 quiet loglevel=4 systemd.unified_cgroup_hierarchy=1"
accel=(-accel tcg,thread=multi -cpu max)
if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then
    # /dev/kvm may exist on a host where it does not work (a PVM host hangs in the kernel's
    # decompressor or aborts on an MSR): a short boot that must reach the kernel's panic proves it.
    probe=$work/kvm-probe.log
    timeout 60 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -no-reboot -nic none \
        -kernel "$kernel" -append "console=ttyS0 panic=-1 rdinit=/nonexistent root=/dev/null" \
        </dev/null >"$probe" 2>&1 || true
    if grep -q 'Kernel panic' "$probe"; then
        accel=(-accel kvm -cpu host)
    else
        say "KVM is present but a probe boot did not work; using TCG"
    fi
fi
say "booting the guest (${accel[*]}, $GUEST_CPUS CPUs, ${GUEST_MEM}M, no network)"
serial=$work/serial.log
t_boot=$(now)
qemu-system-x86_64 "${accel[@]}" -smp "$GUEST_CPUS" -m "$GUEST_MEM" -machine q35 \
    -nographic -no-reboot -nic none \
    -kernel "$kernel" -initrd "$initrd" -append "$append" \
    -drive "file=$image,format=raw,if=virtio,snapshot=on" \
    -drive "file=$payload,format=raw,if=virtio" \
    </dev/null >"$serial" 2>&1 &
qemu_pid=$!
# The serial console as it comes, for whoever watches (CI logs).
tail -n +1 -F --pid="$qemu_pid" "$serial" 2>/dev/null | sed -u 's/\r$//; s/^/guest| /' >&2 &
tail_pid=$!
timed_out=0
t_unit=""
deadline=$(( $(date +%s) + GUEST_TIMEOUT ))
while kill -0 "$qemu_pid" 2>/dev/null; do
    # Boot as the host sees it: QEMU's start (firmware, kernel, systemd) to the test unit.
    if [ -z "$t_unit" ] && grep -q 'guest-test: start' "$serial" 2>/dev/null; then
        t_unit=$(since "$t_boot")
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        timed_out=1
        kill "$qemu_pid" 2>/dev/null || true
        break
    fi
    sleep 1
done
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
wait "$tail_pid" 2>/dev/null || true
t_qemu=$(since "$t_boot")

# --- 5. results ------------------------------------------------------------------------------
# The guest's own copy (whole lines, nothing interleaved) when it could write one; the serial
# log otherwise.
results=$work/checks.log
debugfs -R "cat /results/checks.log" "$payload" >"$results" 2>/dev/null || true
if [ ! -s "$results" ]; then
    say "no results file on the payload disk; reading the serial log"
    tr -d '\r' <"$serial" >"$results"
fi
for f in journal.txt boxmaker.journal.txt e2e-podman.txt e2e-bwrap.txt; do
    debugfs -R "cat /results/$f" "$payload" >"$work/$f" 2>/dev/null || true
done

summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$results" | tail -n 1 || true)
fails=$(grep -cE '^FAIL ' "$results" || true)
echo "=== guest checks ==="
grep -E '^(ok|FAIL|skip) ' "$results" || true
grep -E '^timing ' "$results" || true
echo "timing image ${t_image}s ($image_state)"
echo "timing boot-wall ${t_unit:-?}s (QEMU start to the test unit, host clock)"
echo "timing qemu ${t_qemu}s (boot to power-off)"
echo "timing total $(since "$t_all")s"
rc=0
if [ "$timed_out" = 1 ]; then
    echo "FAIL guest: no power-off within ${GUEST_TIMEOUT}s; QEMU was stopped"
    rc=1
elif [ "$qemu_rc" -ne 0 ]; then
    echo "FAIL guest: QEMU exited with $qemu_rc"
    rc=1
fi
if [ -z "$summary" ]; then
    echo "FAIL guest: the checks did not finish (no summary line)"
    rc=1
elif [ "$fails" -gt 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed' <<<"$summary"; then
    rc=1
fi
echo "${summary:-no summary}"
if [ "$rc" -ne 0 ]; then
    if [ -s "$work/boxmaker.journal.txt" ]; then
        echo "=== brokerd's journal in the guest (last 60 lines) ==="
        tail -n 60 "$work/boxmaker.journal.txt"
    fi
    for b in podman bwrap; do
        if grep -q '^FAIL ' "$work/e2e-$b.txt" 2>/dev/null; then
            echo "=== the scenario suite on $b in the guest (its failures and brokerd's last lines) ==="
            grep -E '^FAIL ' "$work/e2e-$b.txt"
            tail -n 40 "$work/e2e-$b.txt"
        fi
    done
    if [ -s "$work/journal.txt" ] && [ -z "$summary" ]; then
        echo "=== the guest's journal (last 60 lines) ==="
        tail -n 60 "$work/journal.txt"
    fi
    mkdir -p "$REPO/build"
    cp "$serial" "$REPO/build/guest-serial.log" 2>/dev/null || true
    cp "$work"/*.txt "$REPO/build/" 2>/dev/null || true
    say "serial log and journals copied to $REPO/build/"
fi
exit "$rc"
