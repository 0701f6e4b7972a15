#!/usr/bin/env bash
# The tools image without Nix (docs/design.md#deployment), with the layout of the Nix image:
#
#   /bin/toolkit                       the static musl toolkit
#   /bin/busybox                       Debian's busybox-static, and a link to it for every
#                                      applet of bin/ and sbin/ in /bin (sh, ls, cat, ...), as
#                                      the Nix image has:
#                                      the sandbox's PATH is /bin, and a busybox built without
#                                      FEATURE_SH_STANDALONE (nixpkgs') finds applets only so
#   /bin/curl                          Debian's curl and every library ldd names (it speaks
#                                      socks5h:// to a Unix socket, which the egress design needs)
#   /etc/ssl/certs/ca-certificates.crt the system CA bundle, plus --extra-ca for the test variant
#
# --add FILE (repeatable) copies a further dynamically linked program into the tree at its own
# path, with every library ldd names: a toolset of the host's programs (the suite's, with git
# and make) built the same way.
#
# The tree is kept as a directory (the bwrap backend mounts it as /), imported into the service
# user's rootless Podman, and the image ID that [runner] image must name is printed last, alone
# on its line: sha256:<64 hex>.
#
#   images/build-tools-image.sh [--toolkit FILE] [--out DIR] [--name NAME] [--extra-ca PEM]
#                               [--user USER] [--tree-only] [--add FILE]...
#
# --tree-only stops after the tree (for the bwrap backend alone): no Podman, no image ID.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
toolkit=$here/target/x86_64-unknown-linux-musl/release/toolkit
out=$here/build/tools-root
name=localhost/boxmaker-tools
extra_ca=""
user=boxmaker
tree_only=""
added=()

while [ $# -gt 0 ]; do
    case "$1" in
        --toolkit) toolkit=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --extra-ca) extra_ca=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --tree-only) tree_only=1; shift ;;
        --add) added+=("$2"); shift 2 ;;
        *) echo "usage: $0 [--toolkit FILE] [--out DIR] [--name NAME] [--extra-ca PEM] [--user USER] [--tree-only] [--add FILE]..." >&2; exit 2 ;;
    esac
done

say() { printf 'tools-image: %s\n' "$*" >&2; }
die() { printf 'tools-image: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root: the image goes into $user's rootless Podman"
[ -x "$toolkit" ] || die "$toolkit is missing; build it: cargo build --release --target x86_64-unknown-linux-musl -p toolkit"
"$here/scripts/static-check.sh" "$toolkit" >/dev/null || die "$toolkit is not static"
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || die "/bin/busybox is missing or not static; install busybox-static"
[ -x /usr/bin/curl ] || die "/usr/bin/curl is missing; install curl"
[ -f /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt is missing; install ca-certificates"
[ -z "$extra_ca" ] || [ -f "$extra_ca" ] || die "$extra_ca does not exist"
for f in ${added[@]+"${added[@]}"}; do
    case "$f" in /*) ;; *) die "--add $f: give an absolute path" ;; esac
    [ -f "$f" ] && [ -x "$f" ] || die "--add $f: not an executable file"
    ldd "$f" >/dev/null 2>&1 || die "--add $f: not a dynamically linked program ldd can read"
done
case "$out" in /*) ;; *) out=$PWD/$out ;; esac

# Build next to the result and swap at the end, so a failed build leaves the old tree.
new=$(mktemp -d "$(dirname "$out")/.tools-root.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$out")" && mktemp -d "$(dirname "$out")/.tools-root.XXXXXX"; })
trap 'rm -rf "$new"' EXIT
install -d -m 0755 "$new/bin" "$new/etc/ssl/certs" "$new/tmp" "$new/run" "$new/proc" "$new/dev" "$new/sys"
chmod 1777 "$new/tmp"
install -m 0755 "$toolkit" "$new/bin/toolkit"
install -m 0755 /bin/busybox "$new/bin/busybox"
install -m 0755 /usr/bin/curl "$new/bin/curl"
for f in ${added[@]+"${added[@]}"}; do
    install -D -m 0755 "$(readlink -f "$f")" "$new$f"
done
# The applets busybox installs in bin/ and sbin/ (not /linuxrc), all linked in /bin, as
# images/tools-image.nix links nixpkgs' bin/ and sbin/ (`make nix-check` compares the two).
# One perl process makes every link: a process each is slow under QEMU's TCG, where the guest
# test builds this image twice.
# shellcheck disable=SC2016 # perl's variables
applets=$(/bin/busybox --list-full | sed -En 's#^(usr/)?s?bin/##p' | grep -vx busybox |
    perl -e 'my ($dir, $n) = (shift, 0);
        while (my $a = <STDIN>) {
            chomp $a;
            next if -e "$dir/$a";
            symlink("busybox", "$dir/$a") or die "$dir/$a: $!\n";
            $n++;
        }
        print "$n\n";' "$new/bin") || die "the applet links could not be made"
[ -L "$new/bin/sh" ] || die "busybox lists no sh applet"

# curl's libraries (and those of each --add) at the paths the dynamic loader looks for them (the
# loader itself included).
libs=$(for f in /usr/bin/curl ${added[@]+"${added[@]}"}; do ldd "$f"; done |
    awk '/=> \// { print $3 } /^\t\// { print $1 }' | sort -u)
# One cp for them all (--parents keeps each path; -L copies what a link points to).
lib_copies=()
for lib in $libs; do lib_copies+=("$new$lib"); done
n=${#lib_copies[@]}
[ "$n" -eq 0 ] || { cp -L --parents $libs "$new/" && chmod 0755 "${lib_copies[@]}"; } ||
    die "the libraries could not be copied"
# An empty ld.so.cache: the loader then searches its default directories, where the copies are.
cat /etc/ssl/certs/ca-certificates.crt >"$new/etc/ssl/certs/ca-certificates.crt"
if [ -n "$extra_ca" ]; then
    cat "$extra_ca" >>"$new/etc/ssl/certs/ca-certificates.crt"
    say "appended the extra CA $extra_ca to the bundle"
fi
chmod 0644 "$new/etc/ssl/certs/ca-certificates.crt"
# Files Podman bind-mounts over; present so a read-only root needs no new entries.
: >"$new/etc/hosts"
: >"$new/etc/resolv.conf"
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$new/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' >"$new/etc/group"

# Prove the tree works before importing it: curl must start with only the copied libraries.
chroot "$new" /bin/curl --version >/dev/null 2>&1 ||
    die "curl does not start inside the tree ($new); a library is missing"
chroot "$new" /bin/sh -c 'echo ok' >/dev/null || die "/bin/sh does not start inside the tree"
# Each --add must load with only the copied libraries: the loader's failure is exit 127 (what
# the program answers to --version, which some do not take, does not matter).
for f in ${added[@]+"${added[@]}"}; do
    rc=0
    chroot "$new" "$f" --version >/dev/null 2>&1 </dev/null || rc=$?
    [ "$rc" -ne 127 ] && [ "$rc" -ne 126 ] || die "$f does not start inside the tree ($new)"
done
# Every program the suite and the runbook run, found in /bin (images/programs.txt).
"$here/images/check-programs.sh" "$new" || die "the tree lacks programs of images/programs.txt"

rm -rf "$out.old"
[ -e "$out" ] && mv "$out" "$out.old"
# mktemp made it 0700: the tree is the bwrap backend's /, read by the service user.
chmod 0755 "$new"
mv "$new" "$out"
rm -rf "$out.old"
trap - EXIT
say "tree $out: toolkit, busybox with $applets applet links, curl${added[*]:+, ${added[*]}} and $n libraries, $(du -sh "$out" | cut -f1)"
[ -z "$tree_only" ] || exit 0

# Into the service user's Podman. The tar is made by root (files owned by root, mode kept) and
# read by the user's podman from standard input. A fixed mtime keeps the layer reproducible.
as_user() { "$here/scripts/as-boxmaker" "$@"; }
id "$user" >/dev/null 2>&1 || die "no user $user; run scripts/setup.sh user"
old=$(as_user podman image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$out" -c . |
    as_user podman import --quiet --change 'CMD ["/bin/sh"]' - "$name" >/dev/null
id=$(as_user podman image inspect --format '{{.Id}}' "$name")
if [ -n "$old" ] && [ "$old" != "$id" ]; then
    # The old image loses its tag; remove it unless something still uses it.
    as_user podman image rm "$old" >/dev/null 2>&1 || true
fi
say "imported into $user's podman as $name"
echo "sha256:$id"
