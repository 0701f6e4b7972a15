#!/usr/bin/env bash
# The end-to-end suite on this machine (as root): setup, builds, the test variant of the tools
# image (its CA bundle also holds the suite's test CA) and its tree, a toolset of the host's git
# and make built the same way, a repository for it to clone, a network namespace with the
# suite's own hosts, then `boxmaker-e2e run` against a real brokerd inside it, once per backend:
# real rootless Podman, then bubblewrap over the tree. Each run prints `<backend>: N passed, M
# failed`; the last line is the total, `N passed, M failed`.
#
# The part from the namespace on is tests/e2e/in-netns.sh, which the NixOS VM test runs too;
# it says what the namespace holds (no route out, so no packet of the suite leaves it).
# Everything made here is removed on exit, whatever happens.
#
#   tests/e2e/run.sh [--bench N] [--only SCENARIO]...     (E2E_SKIP_SETUP=1 skips setup.sh;
#                                                         E2E_BACKENDS="podman bwrap" by default;
#                                                         E2E_DEV_TOOLSET=host makes the
#                                                         test toolset of the host's git and
#                                                         make, quickly, with a shell project
#                                                         instead of the C one)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
MUSL=x86_64-unknown-linux-musl
target=${CARGO_TARGET_DIR:-$repo/target}
e2e=$target/$MUSL/release/boxmaker-e2e
brokerd=$target/release/brokerd
work=/srv/boxmaker-e2e-$$
ca=/srv/boxmaker-e2e-ca-$$
image_name=localhost/boxmaker-tools-e2e
tree=$repo/build/tools-root-e2e
# A toolset of the host's git and make (the toolset scenarios), and what its clone reads.
dev_image_name=localhost/boxmaker-toolset-e2e-dev
dev_tree=$repo/build/toolset-e2e-dev
suid_tree=$repo/build/toolset-e2e-suid
files=/srv/boxmaker-e2e-files-$$
backends=${E2E_BACKENDS:-podman bwrap}

say() { printf 'e2e: %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { echo "e2e: run as root (it makes a network namespace and the service user)" >&2; exit 2; }

# The test toolsets build in the background (below): each job's pid and log, and the file the
# suite's toolset job writes its image ID to.
jobs_pids=()
jobs_logs=()
toolsets_out=""
cleanup() {
    set +e
    # A toolset build still running is waited for, not killed: mmdebstrap in root mode undoes
    # its own mounts when it ends, and a kill could leave them under a tree removed below.
    for pid in ${jobs_pids[@]+"${jobs_pids[@]}"}; do wait "$pid"; done
    if id boxmaker >/dev/null 2>&1; then
        scripts/as-boxmaker podman image rm "$image_name" "$dev_image_name" >/dev/null 2>&1
        scripts/as-boxmaker podman system migrate >/dev/null 2>&1
    fi
    rm -rf "$ca" "$tree" "$dev_tree" "$suid_tree" "$files" ${toolsets_out:+"$toolsets_out"} \
        ${jobs_logs[@]+"${jobs_logs[@]}"}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${E2E_SKIP_SETUP:-}" != 1 ]; then
    scripts/setup.sh all
fi
# The toolset builds run beside cargo's: mmdebstrap mostly unpacks packages, on one core, and
# each release build ends in single-threaded LTO links. Each runs in the background with its own
# log, shown when it ends; one lock takes them in turn, as they share the download cache.
debian_toolsets=""
[ "${E2E_DEV_TOOLSET:-debian}" != debian ] || debian_toolsets=1
toolsets_lock=/var/cache/boxmaker-toolsets/.e2e.lock
mkdir -p /var/cache/boxmaker-toolsets
background() { # NAME FUNCTION: FUNCTION in the background, under the lock, into its own log
    local log
    log=$(mktemp "/tmp/boxmaker-e2e-$1.XXXXXX")
    jobs_logs+=("$log")
    ( set -e; exec 9>"$toolsets_lock"; flock 9; "$2" ) >"$log" 2>&1 &
    jobs_pids+=("$!")
    say "building $1 in the background (log: $log)"
}
wait_background() { # the jobs' ends, their logs shown; 1 if one failed
    local i rc=0 one
    for i in "${!jobs_pids[@]}"; do
        one=0
        wait "${jobs_pids[$i]}" || one=$?
        cat "${jobs_logs[$i]}" >&2
        [ "$one" -eq 0 ] || { say "a toolset job failed (exit $one; its log is above)"; rc=1; }
    done
    jobs_pids=()
    return "$rc"
}

# A package that brings setuid files (passwd: chfn, chsh, passwd, ...) fails the build, which
# names them and leaves no tree.
refused_toolset() {
    rm -rf "$suid_tree"
    if suid_out=$(images/build-toolset.sh --toolkit "$target/$MUSL/release/toolkit" --tree-only \
        --out "$suid_tree" e2e-suid passwd 2>&1); then
        say "a toolset with setuid files was built: $suid_tree"; return 1
    fi
    case "$suid_out" in
        *"/usr/bin/passwd"*"setuid, setgid or device files"*) say "the builder refused passwd's setuid files, naming them" ;;
        *) say "the builder failed otherwise than on passwd's setuid files: $(printf '%s' "$suid_out" | tail -n 5)"; return 1 ;;
    esac
    [ ! -e "$suid_tree" ] || { say "the refused build left $suid_tree"; return 1; }
}

# The suite's toolset; its bundle holds the test CA. Its project and image ID go to
# $toolsets_out.
suite_toolset() {
    local dev_project=c dev_image
    if [ -n "$debian_toolsets" ]; then
        # From Debian's packages (images/build-toolset.sh: mmdebstrap through the host's apt
        # sources, its downloads cached): git, make and a C compiler, for the C project the
        # staged grant fixes.
        dev_image=$(images/build-toolset.sh --toolkit "$target/$MUSL/release/toolkit" --out "$dev_tree" \
            --extra-ca "$ca/ca.pem" e2e-dev make git gcc libc6-dev | sed -n 's/^image = "\(.*\)"$/\1/p')
    else
        # The host's git and make copied into a tree (quick; no compiler: a shell project).
        dev_project=sh
        dev_image=$(images/build-tools-image.sh --toolkit "$target/$MUSL/release/toolkit" --out "$dev_tree" \
            --name "$dev_image_name" --extra-ca "$ca/ca.pem" \
            --add /usr/bin/git --add /usr/lib/git-core/git-remote-https --add /usr/bin/make | tail -n 1)
    fi
    printf '%s %s\n' "$dev_project" "$dev_image" >"$toolsets_out"
}
# The Debian toolset's image is loaded under its build's name (the clean-up removes it).
[ -z "$debian_toolsets" ] || dev_image_name=localhost/boxmaker-toolset-e2e-dev:latest
toolsets_out=$(mktemp /tmp/boxmaker-e2e-toolsets.XXXXXX)

# toolkit and boxmaker-e2e in a build each, as make's static-check, mcp-test and guest-test
# build them: cargo unifies the features of shared dependencies (nix, serde, ...) over the
# packages of one build, so a build of the two together makes artifacts of its own, and those
# later builds compiled both packages again.
say "building toolkit"
cargo build --release --locked --target $MUSL -p toolkit
scripts/static-check.sh "$target/$MUSL/release/toolkit"
[ -z "$debian_toolsets" ] || background refused-toolset refused_toolset
say "building boxmaker-e2e"
cargo build --release --locked --target $MUSL -p boxmaker-e2e
scripts/static-check.sh "$e2e"
install -d -m 0755 "$ca"
"$e2e" ca --out "$ca" >/dev/null
background suite-toolset suite_toolset
say "building brokerd"
cargo build --release --locked -p brokerd -p boxctl

image=$(images/build-tools-image.sh --toolkit "$target/$MUSL/release/toolkit" --out "$tree" \
    --name "$image_name" --extra-ca "$ca/ca.pem" | tail -n 1)
say "test image $image"
wait_background || exit 1
read -r dev_project dev_image <"$toolsets_out" || true
[ -n "$dev_image" ] || { say "the test toolset was not built"; exit 1; }
say "test toolset e2e-dev $dev_image"

# A repository for the toolset's git to clone from https://ok.test/files/repo.git (dumb HTTP):
# a Makefile whose test builds a program and runs it. The host's git, none of its config.
install -d -m 0755 "$files" "$files/src"
printf 'test: hello\n\t./hello\n\nhello: hello.sh\n\tcp hello.sh hello && chmod +x hello\n' \
    >"$files/src/Makefile"
printf '#!/bin/sh\necho built and tested\n' >"$files/src/hello.sh"
printf 'hello\n' >"$files/src/.gitignore"
(
    export HOME=$files GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=boxmaker-e2e GIT_COMMITTER_NAME=boxmaker-e2e \
        GIT_AUTHOR_EMAIL=e2e@ok.test GIT_COMMITTER_EMAIL=e2e@ok.test
    git -c init.defaultBranch=main init -q "$files/src"
    git -C "$files/src" add -A
    git -C "$files/src" commit -q -m "e2e: a project to build"
    git clone -q --bare "$files/src" "$files/repo.git"
    # One pack: a dumb-HTTP clone then reads a handful of files (over one connection the test
    # host keeps open).
    git -C "$files/repo.git" repack -q -a -d
    git -C "$files/repo.git" update-server-info
)
rm -rf "$files/src"

# The test hosts' layout against pasta (Debian's passt: this Podman has no pasta network, so
# the suite below runs the proxy on slirp4netns; in-netns.sh checks the layout again where the
# suite's Podman runs pasta, as on NixOS).
tests/e2e/pasta-layout.sh

# The namespace, the test hosts and the suite per backend, as the NixOS VM test runs them too.
rc=0
tests/e2e/in-netns.sh --e2e "$e2e" --brokerd "$brokerd" --ca "$ca" --work "$work" \
    --image "$image" --tools-root "$tree" --backends "$backends" --files "$files" \
    -- --dev-image "$dev_image" --dev-tree "$dev_tree" --dev-project "$dev_project" "$@" || rc=$?
exit "$rc"
