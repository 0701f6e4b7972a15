#!/usr/bin/env python3
"""Writes a one-layer docker-archive shaped like nixpkgs' buildLayeredImage output (the config
named by its sha256, JSON with sorted keys, gzip) and prints the image ID Podman gives it: the
sha256 of that config. Used to test nixos/pkgs/image-id.sh and load-image.sh without Nix.

    synthetic_image.py OUT.tar.gz TEXT [TAG]
"""
import gzip
import hashlib
import io
import json
import sys
import tarfile


def member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1
    tar.addfile(info, io.BytesIO(data))


def main(out, text, tag="synthetic"):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        member(t, "hello", text.encode())
    layer = layer.getvalue()
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:01Z",
            "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
        },
        sort_keys=True,
    ).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = [{"Config": f"{config_id}.json", "RepoTags": [f"boxmaker-tools:{tag}"],
                 "Layers": [f"{diff_id}/layer.tar"]}]
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as t:
        member(t, f"{diff_id}/layer.tar", layer)
        member(t, f"{config_id}.json", config)
        member(t, "manifest.json", json.dumps(manifest).encode())
    with open(out, "wb") as f:
        f.write(gzip.compress(archive.getvalue(), mtime=0))
    print(f"sha256:{config_id}")


if __name__ == "__main__":
    main(*sys.argv[1:])
