#!/usr/bin/env bash
# Prints the image ID Podman will give a docker-archive image once it is loaded: the sha256 of
# the config JSON that the archive's manifest.json names ("Config"). Podman keeps that ID
# through `podman load` and `podman save`, so it can be computed when the image is built and
# pinned in [runner] image (docs/design.md#config); a RepoDigest is made at load time and is not.
#
#   image-id.sh ARCHIVE            ARCHIVE: a .tar or a compressed tar (buildLayeredImage's .tar.gz)
#   image-id.sh --stream PROGRAM   PROGRAM writes the archive to its standard output
#                                  (dockerTools.streamLayeredImage's script); read once, keeping
#                                  only its top-level JSON files
# Needs tar (and gzip for .tar.gz), jq and sha256sum.
set -euo pipefail
usage="usage: image-id.sh ARCHIVE | image-id.sh --stream PROGRAM"
stream=""
if [ "${1:-}" = --stream ]; then
    stream=${2:?$usage}
    archive="the archive $stream writes"
else
    archive=${1:?$usage}
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$stream" ]; then
    # manifest.json and the config (<hex>.json) are the archive's only top-level JSON files; the
    # rest is read through to the end, so that the program is never cut off mid-write.
    "$stream" | {
        tar -x -C "$work" --wildcards --no-wildcards-match-slash manifest.json '*.json' || exit 1
        cat >/dev/null
    }
    [ -f "$work/manifest.json" ] || { echo "image-id: $archive has no manifest.json" >&2; exit 1; }
else
    tar -xf "$archive" -C "$work" manifest.json
fi
count=$(jq 'length' "$work/manifest.json")
if [ "$count" != 1 ]; then
    echo "image-id: $archive holds $count images; expected exactly one" >&2
    exit 1
fi
config=$(jq -r '.[0].Config' "$work/manifest.json")
case "$config" in
    "" | null | /* | *..*) echo "image-id: manifest.json names no usable Config ($config)" >&2; exit 1 ;;
esac
if [ -z "$stream" ]; then
    tar -xf "$archive" -C "$work" "$config"
fi
[ -f "$work/$config" ] || { echo "image-id: $archive has no $config" >&2; exit 1; }
sum=$(sha256sum "$work/$config" | cut -d' ' -f1)
# Archives name the config by its digest (<hex>.json, or blobs/sha256/<hex>): a mismatch means
# the archive is damaged.
name=$(basename "$config" .json)
if [ "${#name}" = 64 ] && [ "$name" != "$sum" ]; then
    echo "image-id: $config does not hash to its own name (sha256 $sum)" >&2
    exit 1
fi
echo "sha256:$sum"
