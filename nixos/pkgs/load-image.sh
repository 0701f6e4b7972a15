#!/usr/bin/env bash
# Loads an image into the service user's rootless Podman, proves that Podman's image ID is the
# pinned one, and removes older images of the same name. Run by services.boxmaker's
# ExecStartPre as the service user, before brokerd starts: for the tools image, and for each
# toolset the module builds (nixos/toolsets.nix).
#
#   load-image.sh [--stream] [--toolset TOOLSET] ARCHIVE ID-FILE NAME
#     ARCHIVE    the image (buildLayeredImage's .tar.gz), or with --stream a program that
#                writes it to its standard output (streamLayeredImage's script)
#     ID-FILE    holds the pinned ID, sha256:<64 hex> (computed from ARCHIVE at build time)
#     NAME       the image's name, e.g. boxmaker-tools: older images with it are pruned
#     --toolset  the image is that toolset's: said so in every line, and a failure points at
#                runbook/runner.md#toolset-unavailable
# PODMAN names the podman program (default: podman on PATH).
set -euo pipefail
usage="usage: load-image.sh [--stream] [--toolset TOOLSET] ARCHIVE ID-FILE NAME"
stream=""
what="the tools image"
pointer="see runbook/runner.md#runner-unavailable"
while [ $# -gt 0 ]; do
    case "$1" in
        --stream) stream=1; shift ;;
        --toolset)
            what="the toolset ${2:?$usage}'s image"
            pointer="see runbook/runner.md#toolset-unavailable"
            shift 2
            ;;
        -*) echo "$usage" >&2; exit 2 ;;
        *) break ;;
    esac
done
archive=${1:?$usage}
want=$(cat "${2:?$usage}")
name=${3:?$usage}
podman=${PODMAN:-podman}

if ! [[ $want =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "boxmaker: the pinned ID of $what, \"$want\", is not sha256:<64 hex>; $pointer" >&2
    exit 1
fi
hex=${want#sha256:}

# Rootless Podman finds the user's runtime directory and systemd through these.
uid=$(id -u)
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/run/user/$uid}
export DBUS_SESSION_BUS_ADDRESS=${DBUS_SESSION_BUS_ADDRESS:-unix:path=$XDG_RUNTIME_DIR/bus}

if "$podman" image exists "$hex"; then
    echo "boxmaker: $what $want is already loaded"
elif [ -n "$stream" ]; then
    echo "boxmaker: loading $what from $archive"
    "$archive" | "$podman" load --quiet >/dev/null
else
    echo "boxmaker: loading $what $archive"
    # Decompressed here: some Podman versions (Debian's 4.3) cannot read a compressed
    # docker-archive.
    case $archive in
        *.gz) gzip -dc "$archive" | "$podman" load --quiet >/dev/null ;;
        *.zst) zstd -dc "$archive" | "$podman" load --quiet >/dev/null ;;
        *) "$podman" load --quiet --input "$archive" >/dev/null ;;
    esac
fi

got=$("$podman" image inspect --format '{{.Id}}' "$hex" 2>/dev/null || true)
got=sha256:${got#sha256:}
if [ "$got" != "$want" ]; then
    echo "boxmaker: $archive did not load as the pinned image $want (podman has ${got#sha256:}); rebuild the system so that the image and its ID agree; $pointer" >&2
    exit 1
fi

# Older images of this name go, unless something still uses them.
"$podman" images --noheading --no-trunc --filter "reference=$name" --format '{{.ID}}' |
    sort -u | while read -r id; do
        [ "sha256:${id#sha256:}" = "$want" ] && continue
        if "$podman" image rm "$id" >/dev/null 2>&1; then
            echo "boxmaker: removed an older image of $what, $id"
        else
            echo "boxmaker: kept an older image of $what, $id: podman would not remove it (still in use?)"
        fi
    done
echo "boxmaker: $what is $want"
