#!/usr/bin/env bash
# `make nix-sandbox-check`: the check phase of nixos/pkgs/boxmaker.nix (`checks.crate-tests`)
# run here the way Nix's build sandbox would run it, with bubblewrap, since no Nix build can run
# on this machine. As root; the build itself runs as `nobody`, mapped to uid 1000 inside.
#
# What the build sees, as in Nix's sandbox:
#   /build/source         the files the package's fileset names (Cargo.toml, Cargo.lock,
#                         crates/, tests/e2e/), as git tracks them (a flake sees nothing else)
#   /build/cargo-vendor-dir  every crate of Cargo.lock (`cargo vendor`), sources replaced in
#                         /build/.cargo/config.toml as nixpkgs' cargoSetupHook does
#   /bin/sh               busybox (Nix's sandbox shell); no /bin/bash, no /usr/bin/env, no /sys,
#                         no /run, no network (a namespace with loopback only)
#   /tmp                  empty, writable, mode 1777 (Nix makes one in every build's chroot)
#   PATH                  the Rust toolchain, and stdenv's tools: coreutils, findutils,
#                         diffutils, sed, grep, gawk, tar, gzip, bzip2, xz, make, bash, patch,
#                         file, and the C compiler and binutils; nothing else of the host's
#                         /usr/bin (no bwrap, podman, busybox or env there)
#   /usr                  of the host only what that toolchain loads and links: the shared
#                         libraries its programs need (ldd), glibc's and libgcc's development
#                         files, gcc's own directories and the C headers; no /usr/share, no
#                         /usr/local, no other library
#   HOME=/homeless-shelter (absent), TMPDIR=/build, NIX_BUILD_CORES=2
#
# and then the check phase's command, as nixpkgs' cargoCheckHook builds it from the package's
# checkType, cargoTestFlags and checkFlags (--skip for each name of nixos/pkgs/check-skips.txt):
#   cargo test -j 2 --target x86_64-unknown-linux-gnu --offline --workspace \
#     -- --test-threads=2 --skip=...
# with no --profile, since the package's checkType is "debug" (cargo's test profile); any
# other checkType (its default is buildType, "release") is passed as `--profile <checkType>`,
# here as by the hook.
#
# The vendored crates are kept in build/nix-vendor (made again when Cargo.lock changes); the
# build directory is fresh each run and removed after it. NIX_SANDBOX_ALL=1 adds --no-fail-fast,
# to see every failing test binary at once (the check phase itself stops at the first).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
say() { printf 'nix-sandbox-check: %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { say "run as root (the build runs as nobody in a mount namespace root makes)"; exit 2; }
for prog in bwrap setpriv unshare git cargo; do
    command -v "$prog" >/dev/null || { say "$prog is missing"; exit 2; }
done
[ -x /bin/busybox ] || { say "/bin/busybox is missing (apt-get install busybox-static)"; exit 2; }

# The package's own test flags: what is run here must be what boxmaker.nix asks for.
grep -q 'cargoTestFlags = \[ "--workspace" \];' nixos/pkgs/boxmaker.nix ||
    { say "nixos/pkgs/boxmaker.nix's cargoTestFlags changed; change this script with it"; exit 1; }
if grep -q 'postPatch\|preCheck' nixos/pkgs/boxmaker.nix ||
    ! grep -q 'builtins.readFile ./check-skips.txt' nixos/pkgs/boxmaker.nix; then
    say "nixos/pkgs/boxmaker.nix patches or wraps its check phase, or takes its skip list elsewhere; this script does not reproduce that"
    exit 1
fi
# The check phase's profile, as cargoCheckHook picks it: checkType, else buildType, else
# "release"; `--profile <it>` unless it is "debug".
nix_string() { sed -n "s/^ *$1 = \"\([^\"]*\)\";.*/\1/p" nixos/pkgs/boxmaker.nix | head -n 1; }
check_type=$(nix_string checkType)
build_type=$(nix_string buildType)
check_type=${check_type:-${build_type:-release}}
profile=""
[ "$check_type" = debug ] || profile=" --profile $check_type"
skips=()
while IFS= read -r name; do
    case "$name" in ''|'#'*) continue ;; esac
    skips+=("--skip=$name")
done <nixos/pkgs/check-skips.txt

cores=2
triple=x86_64-unknown-linux-gnu
sysroot=$(rustc --print sysroot)

# --- the vendored crates, as importCargoLock makes them -------------------------------------
vendor=$repo/build/nix-vendor
stamp=$(sha256sum Cargo.lock | cut -d' ' -f1)
if [ "$(cat "$vendor/stamp" 2>/dev/null)" != "$stamp" ]; then
    say "vendoring the crates of Cargo.lock into $vendor"
    rm -rf "$vendor"
    mkdir -p "$vendor"
    cargo vendor --locked --versioned-dirs --quiet "$vendor/crates" >/dev/null
    echo "$stamp" >"$vendor/stamp"
fi

# --- the build directory ---------------------------------------------------------------------
work=$(mktemp -d /var/tmp/boxmaker-nix-sandbox.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
chmod 0755 "$work"
mkdir -p "$work/build/source" "$work/build/.cargo" "$work/rust" "$work/etc"
git ls-files -z -- Cargo.toml Cargo.lock crates tests/e2e |
    tar --null -T - -cf - | tar -xf - -C "$work/build/source"
cat >"$work/build/.cargo/config.toml" <<'EOF'
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "/build/cargo-vendor-dir"
EOF
chown -R nobody:nogroup "$work/build"

cat >"$work/etc/passwd" <<'EOF'
root:x:0:0:Nix build user:/build:/noshell
nixbld:x:1000:100:Nix build user:/build:/noshell
nobody:x:65534:65534:Nobody:/:/noshell
EOF
cat >"$work/etc/group" <<'EOF'
root:x:0:
nixbld:!:100:
nogroup:x:65534:
EOF
cat >"$work/etc/hosts" <<'EOF'
127.0.0.1 localhost
::1 localhost
EOF

# stdenv's tools, each bound alone into /stdenv/bin (the host's /usr/bin is hidden); the C
# compiler and binutils into /usr/bin, where gcc looks for its own parts (its LTO plugin is
# found relative to the program).
tools=()
for pkg in coreutils findutils diffutils sed grep gawk tar gzip bzip2 xz-utils make bash patch file; do
    while IFS= read -r f; do
        [ -f "$f" ] && [ -x "$f" ] && tools+=("$f")
    done < <(dpkg -L "$pkg" 2>/dev/null | grep -E '^/(usr/)?s?bin/[^/]+$' || true)
done
bind_tools=()
for f in "${tools[@]}"; do
    bind_tools+=(--ro-bind "$f" "/stdenv/bin/$(basename "$f")")
done
compilers=()
for t in cc gcc cpp c++ g++ as ld ld.bfd ar ranlib nm strip objcopy objdump readelf; do
    p=$(command -v "$t" 2>/dev/null) && { bind_tools+=(--ro-bind "$p" "/usr/bin/$t"); compilers+=("$p"); }
done

# Of the host's /usr, what that toolchain loads and links: every shared library its programs
# (and gcc's own, and the Rust toolchain's) need, glibc's and libgcc's development files, gcc's
# directories and the C headers. Each file at its own path; nothing else.
gcc_dirs=()
for d in /usr/lib/gcc /usr/libexec/gcc /usr/include; do
    [ -d "$d" ] && gcc_dirs+=(--ro-bind "$d" "$d")
done
programs=("${tools[@]}" "${compilers[@]}" /bin/busybox)
while IFS= read -r f; do programs+=("$f"); done < <(
    find /usr/lib/gcc /usr/libexec/gcc "$sysroot/bin" "$sysroot/lib" -maxdepth 4 -type f \( -perm -u+x -o -name '*.so*' \) 2>/dev/null)
libs=$(for f in "${programs[@]}"; do ldd "$f" 2>/dev/null || true; done |
    awk '/=> \// { print $3 } /^\t\// { print $1 }' | grep -E '^/(usr/)?lib' | sort -u)
dev=$(dpkg -L libc6 libc6-dev 2>/dev/null |
    grep -E '^/usr/lib/x86_64-linux-gnu/[^/]+$' | sort -u)
bind_usr=()
declare -A seen=()
for f in $libs $dev; do
    for p in "$f" "$(readlink -f "$f")"; do
        case "$p" in /lib/*|/lib64/*) p=/usr$p ;; esac
        [ -e "$p" ] && [ -z "${seen[$p]:-}" ] || continue
        seen[$p]=1
        bind_usr+=(--ro-bind "$p" "$p")
    done
done

command="cargo test -j $cores$profile --target $triple --offline --workspace${NIX_SANDBOX_ALL:+ --no-fail-fast} -- --test-threads=$cores ${skips[*]}"
# First the sandbox checks itself: what Nix's lacks must be absent here too.
selfcheck='for p in /bin/bash /usr/bin/env /sys /run /root "$HOME" /usr/share /usr/local /usr/lib/python3; do
        if [ -e "$p" ]; then echo "nix-sandbox-check: $p exists in the sandbox" >&2; exit 3; fi
    done
    [ "$(stat -c %a /tmp)" = 1777 ] && touch /tmp/.w && rm /tmp/.w ||
        { echo "nix-sandbox-check: /tmp is not a writable 1777 directory" >&2; exit 3; }
    [ "$(id -u)" = 1000 ] || { echo "nix-sandbox-check: not the build user" >&2; exit 3; }
    if grep -v "^ *lo:" /proc/net/dev | grep -q ":"; then
        echo "nix-sandbox-check: a network interface besides lo" >&2; exit 3
    fi
    for d in $(echo "$PATH" | tr ":" " "); do
        for t in bwrap podman busybox env; do
            if [ -e "$d/$t" ] && [ "$d/$t" != /stdenv/bin/env ]; then
                echo "nix-sandbox-check: $d/$t is on PATH" >&2; exit 3
            fi
        done
    done'
say "running, as the build user: $command"
start=$(date +%s)
set +e
# A mount namespace of root's own makes the toolchain (under root's home) visible to nobody;
# nothing else of root's is.
unshare --mount --propagation private -- /bin/sh -c '
    mount --bind "$1" "$2/rust" && mount -o remount,bind,ro "$2/rust" || exit 2
    shift 2
    exec setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all -- "$@"
' sh "$sysroot" "$work" \
    env -i /usr/bin/bwrap \
    --unshare-all --unshare-user --uid 1000 --gid 100 --hostname localhost \
    --die-with-parent \
    --dir /usr/bin "${gcc_dirs[@]}" "${bind_usr[@]}" \
    --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --perms 1777 --tmpfs /tmp \
    --dir /bin --ro-bind /bin/busybox /bin/sh \
    --dir /stdenv/bin "${bind_tools[@]}" \
    --ro-bind "$work/rust" /rust \
    --bind "$work/build" /build \
    --ro-bind "$vendor/crates" /build/cargo-vendor-dir \
    --ro-bind "$work/etc/passwd" /etc/passwd \
    --ro-bind "$work/etc/group" /etc/group \
    --ro-bind "$work/etc/hosts" /etc/hosts \
    --dev /dev --proc /proc \
    --chdir /build/source \
    --setenv PATH /rust/bin:/stdenv/bin:/usr/bin \
    --setenv HOME /homeless-shelter \
    --setenv TMPDIR /build --setenv TEMPDIR /build --setenv TMP /build --setenv TEMP /build \
    --setenv NIX_BUILD_TOP /build --setenv NIX_BUILD_CORES "$cores" \
    --setenv SOURCE_DATE_EPOCH 315532800 --setenv TZ UTC0 \
    /bin/sh -c "$selfcheck && cd /build/source && $command"
rc=$?
set -e
took=$(($(date +%s) - start))
if [ "$rc" -ne 0 ]; then
    say "the check phase FAILED (exit $rc) after ${took}s"
    exit 1
fi
say "the check phase passed in ${took}s"
