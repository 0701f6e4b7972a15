#!/usr/bin/env bash
# A toolset from Debian's own packages (docs/design.md#toolsets): Debian's essential set and
# the PACKAGEs with their dependencies, installed by mmdebstrap through the host's apt sources,
# plus what every toolset holds:
#
#   /bin/toolkit   the static musl toolkit (of this tree's version: brokerd checks it)
#   /bin/busybox   Debian's busybox-static; /bin/sh is it (ash, the shell the classifier
#                  reads), and each of its applets the packages do not provide is linked to it
#   /etc           its own passwd and group (root, nobody and the sandbox's user), empty hosts
#                  and resolv.conf for Podman to bind over, nothing of the host's but the CA
#                  bundle: /etc/ssl/certs/ca-certificates.crt is the host's public one (plus
#                  --extra-ca PEM), whether or not a PACKAGE brought its own
#
# A toolset holds no setuid or setgid file and no device node: the build fails, naming each.
# Debian's essential set itself has a few (su, newgrp, unix_chkpwd, two setgid directories):
# their bits are dropped before the PACKAGEs are installed (no sandbox could use them: every
# sandbox runs with no_new_privs), so what fails the build is what a PACKAGE brings.
# Two builds from the same package versions give the same tree and the same image ID: every
# mtime is SOURCE_DATE_EPOCH (default: the newest Release file of the host's apt lists), the
# layer is a tar sorted by name, and the image's config carries no time of its own.
#
# The tree is written to --out (default build/toolsets/NAME) for the bwrap backend, loaded
# into the service user's rootless Podman, and the config lines to pin are printed last:
#
#   [toolsets.NAME]
#   image = "sha256:<64 hex>"
#   tree = "<out>"
#
#   images/build-toolset.sh [--toolkit FILE] [--out DIR] [--user USER] [--suite SUITE]
#                           [--extra-ca PEM] [--tree-only] NAME PACKAGE...
#
# Downloaded packages are kept in /var/cache/boxmaker-toolsets/archives and used again.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
toolkit=$here/target/x86_64-unknown-linux-musl/release/toolkit
out=""
user=boxmaker
suite=bookworm
tree_only=""
extra_ca=""
cache=/var/cache/boxmaker-toolsets
usage="usage: $0 [--toolkit FILE] [--out DIR] [--user USER] [--suite SUITE] [--extra-ca PEM] [--tree-only] NAME PACKAGE..."

while [ $# -gt 0 ]; do
    case "$1" in
        --toolkit) toolkit=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --suite) suite=$2; shift 2 ;;
        --extra-ca) extra_ca=$2; shift 2 ;;
        --tree-only) tree_only=1; shift ;;
        -*) echo "$usage" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
name=$1
shift
packages=("$@")

say() { printf 'toolset %s: %s\n' "$name" "$*" >&2; }
die() { printf 'toolset %s: %s\n' "$name" "$*" >&2; exit 1; }

# The name becomes [toolsets.NAME] and an image name: brokerd's identifier rule.
[[ "$name" =~ ^[A-Za-z0-9_.-]{1,64}$ ]] && [ "$name" != . ] && [ "$name" != .. ] ||
    die "not a toolset name: 1 to 64 of A-Z a-z 0-9 _ . -"
[ "$name" != base ] || die "\"base\" is the built-in toolset"
for p in "${packages[@]}"; do
    [[ "$p" =~ ^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$ ]] || die "not a Debian package name: $p"
done
[ "$(id -u)" -eq 0 ] || die "run as root: mmdebstrap installs as root, and the image goes into $user's rootless Podman"
[ -x "$toolkit" ] || die "$toolkit is missing; build it: cargo build --release --target x86_64-unknown-linux-musl -p toolkit"
"$here/scripts/static-check.sh" "$toolkit" >/dev/null || die "$toolkit is not static"
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || die "/bin/busybox is missing or not static; install busybox-static"
[ -f /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt is missing; install ca-certificates"
[ -z "$extra_ca" ] || [ -f "$extra_ca" ] || die "$extra_ca does not exist"
if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap with apt"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap >&2 ||
        die "mmdebstrap could not be installed"
fi
[ -n "$out" ] || out=$here/build/toolsets/$name
case "$out" in /*) ;; *) out=$PWD/$out ;; esac

# The host's apt sources, as apt itself reads them.
# A fixed file name: mmdebstrap copies the file into the tree under its name.
sources_dir=$(mktemp -d)
sources=$sources_dir/host
work=""
trap 'rm -rf "$sources_dir"; [ -z "$work" ] || rm -rf "$work"' EXIT
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    case "$f" in
        *.sources) cat "$f" ;;
        *) grep -E '^[[:space:]]*deb[[:space:]]' "$f" || true ;;
    esac
    echo
done >"$sources"
grep -qE '^(Types:|[[:space:]]*deb[[:space:]])' "$sources" || die "no apt sources on this host"
case "$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null)" in
    *Types:*) sources_kind=.sources ;;
    *) sources_kind=.list ;;
esac
mv "$sources" "$sources$sources_kind"
sources=$sources$sources_kind

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    # The newest Release file apt has: the same package versions give the same epoch.
    newest=$(ls -t /var/lib/apt/lists/*Release 2>/dev/null | head -n 1 || true)
    SOURCE_DATE_EPOCH=$([ -n "$newest" ] && stat -c %Y "$newest" || echo 0)
fi
export SOURCE_DATE_EPOCH
[[ "$SOURCE_DATE_EPOCH" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH is not a number of seconds"

# Build next to the result and swap at the end, so a failed build leaves the old tree.
mkdir -p "$(dirname "$out")" "$cache/archives"
work=$(mktemp -d "$(dirname "$out")/.toolset-$name.XXXXXX")
new=$work/tree
include=$(IFS=,; echo "${packages[*]}")
say "installing $include and Debian's essential set ($suite) with mmdebstrap"
mmdebstrap --mode=root --variant=essential --include="$include" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --essential-hook='find "$1" -xdev -perm /6000 -exec chmod ug-s {} +' \
    --skip=download/empty --skip=essential/unlink \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in $cache/archives /var/cache/apt/archives/" \
    --customize-hook="sync-out /var/cache/apt/archives $cache/archives" \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache "$1"/etc/apt/sources.list.d/0000host*' \
    "$suite" "$new" "$sources" >&2 || die "mmdebstrap failed"

# What every toolset holds. Debian 12's /bin is /usr/bin.
bin=$new/usr/bin
[ -d "$bin" ] || bin=$new/bin
install -m 0755 "$toolkit" "$bin/toolkit"
install -m 0755 /bin/busybox "$bin/busybox"
ln -sf busybox "$bin/sh"
applets=0
for applet in $(/bin/busybox --list); do
    [ "$applet" != busybox ] || continue
    if [ ! -e "$bin/$applet" ] && [ ! -e "$new/usr/sbin/$applet" ] && [ ! -L "$bin/$applet" ]; then
        ln -s busybox "$bin/$applet"
        applets=$((applets + 1))
    fi
done
# Its own /etc: the sandbox's users (Podman's keep-id user is added by Podman itself; bwrap's
# is the service user's uid, shown by number), no host data.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$new/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$new/etc/group"
rm -f "$new/etc/shadow" "$new/etc/gshadow" "$new/etc/shadow-" "$new/etc/gshadow-" "$new/etc/passwd-" "$new/etc/group-"
: >"$new/etc/hosts"
: >"$new/etc/resolv.conf"
printf '%s\n' "$name" >"$new/etc/hostname"
# The CA bundle every TLS client of the toolset reads (git, curl, pip, cargo): a file, never a
# link out of the tree.
install -d -m 0755 "$new/etc/ssl/certs"
rm -f "$new/etc/ssl/certs/ca-certificates.crt"
cat /etc/ssl/certs/ca-certificates.crt ${extra_ca:+"$extra_ca"} >"$new/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$new/etc/ssl/certs/ca-certificates.crt"
rm -f "$new/etc/machine-id"
install -d -m 1777 "$new/tmp"
install -d -m 0755 "$new/run" "$new/proc" "$new/dev" "$new/sys"
find "$new/dev" -mindepth 1 -maxdepth 1 -exec rm -rf {} +

# Nothing that could raise a privilege or reach a device: the build fails, naming each.
bad=$(find "$new" -xdev \( -perm -4000 -o -perm -2000 -o -type b -o -type c \) -printf '%M %p\n' | sed "s|$new||" | sort)
if [ -n "$bad" ]; then
    printf '%s\n' "$bad" >&2
    die "the toolset would carry the setuid, setgid or device files above; leave out the package that brings them"
fi
chroot "$new" /bin/toolkit version >/dev/null || die "/bin/toolkit does not run inside the tree"
chroot "$new" /bin/sh -c 'echo ok' >/dev/null || die "/bin/sh does not start inside the tree"

# Every mtime the epoch: the same packages give the same tree and the same layer.
find "$new" -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +
chmod 0755 "$new"
rm -rf "$out.old"
[ -e "$out" ] && mv "$out" "$out.old"
mv "$new" "$out"
rm -rf "$out.old"
say "tree $out: ${#packages[@]} packages with their dependencies, toolkit, busybox with $applets applet links, $(du -sh "$out" | cut -f1)"
image_line=""
if [ -z "$tree_only" ]; then
    id "$user" >/dev/null 2>&1 || die "no user $user; run scripts/setup.sh user"
    # A docker-archive of one layer whose config has no time of its own: its digest, the
    # image ID, depends on the tree alone.
    arch=$work/archive
    mkdir -p "$arch"
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
        --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -C "$out" -c . >"$arch/layer.tar"
    layer=$(sha256sum "$arch/layer.tar" | cut -d' ' -f1)
    created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
    printf '{"architecture":"amd64","config":{"Cmd":["/bin/sh"],"Env":["PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"]},"created":"%s","history":[{"created":"%s","created_by":"images/build-toolset.sh"}],"os":"linux","rootfs":{"diff_ids":["sha256:%s"],"type":"layers"}}' \
        "$created" "$created" "$layer" >"$arch/config.json"
    config=$(sha256sum "$arch/config.json" | cut -d' ' -f1)
    mv "$arch/config.json" "$arch/$config.json"
    mkdir "$arch/$layer"
    mv "$arch/layer.tar" "$arch/$layer/layer.tar"
    ref=localhost/boxmaker-toolset-$name:latest
    printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$ref" "$layer" >"$arch/manifest.json"
    as_user() { "$here/scripts/as-boxmaker" "$@"; }
    old=$(as_user podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$arch" -c . |
        as_user podman load --quiet >/dev/null || die "podman load failed"
    id=$(as_user podman image inspect --format '{{.Id}}' "$ref")
    [ "$id" = "$config" ] || die "podman names the image $id, not $config"
    if [ -n "$old" ] && [ "$old" != "$id" ]; then
        as_user podman image rm "$old" >/dev/null 2>&1 || true
    fi
    say "loaded into $user's podman as $ref"
    image_line="image = \"sha256:$id\""
fi
echo "[toolsets.$name]"
[ -z "$image_line" ] || echo "$image_line"
echo "tree = \"$out\""
