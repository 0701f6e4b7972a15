#!/usr/bin/env bash
# Checks that a tools image tree's shell finds every program of images/programs.txt in /bin,
# with PATH=/bin and nothing else, through a link or a file there: a busybox built without
# FEATURE_SH_STANDALONE (nixpkgs') runs an applet only through its link, so a busybox that does
# run applets without one (Debian's) must not hide a missing link. Run inside the tree by
# bubblewrap (as root or any user; nothing of the host is visible but the tree and BINDs).
#
#   images/check-programs.sh TREE [--bind SRC DEST]...
#
# --bind adds a read-only bind (a stand-in for a /nix/store path a link of the tree points to).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=${1:?usage: $0 TREE [--bind SRC DEST]...}
shift
binds=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bind) binds+=(--ro-bind "$2" "$3"); shift 3 ;;
        *) echo "usage: $0 TREE [--bind SRC DEST]..." >&2; exit 2 ;;
    esac
done
programs=$(grep -v '^#' "$here/programs.txt" | grep -v '^$' | tr '\n' ' ')
# Inside: each program must be an executable under /bin (a link is followed), and the shell's
# lookup (command -v) must name /bin/<program> or the shell's own builtin.
# shellcheck disable=SC2016
bwrap --ro-bind "$tree" / "${binds[@]}" --proc /proc --dev /dev --unshare-all --die-with-parent \
    --clearenv --setenv PATH /bin \
    /bin/sh -c '
missing=""
for p in "$@"; do
    found=$(command -v "$p" 2>/dev/null || true)
    if [ -x "/bin/$p" ] && [ "$found" = "/bin/$p" ]; then continue; fi
    case "$found" in "$p") [ -x "/bin/$p" ] && continue ;; esac
    missing="$missing $p"
done
if [ -n "$missing" ]; then echo "check-programs: not found in /bin:$missing" >&2; exit 1; fi
' check-programs $programs
echo "check-programs: $tree has all $(echo "$programs" | wc -w) programs in /bin"
