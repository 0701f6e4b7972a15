"""`check.py scripts`: nixos/pkgs/image-id.sh and load-image.sh against a synthetic image and
a fake podman, and vm-tests/e2e.nix's driver holding every script its scripts call."""
import os
import re
import sys
import tempfile
from pathlib import Path

from checklib import ROOT, check, run


def scripts():
    pkgs = ROOT / "nixos/pkgs"
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        ids = {}
        for name in ("old", "new"):
            out = run([sys.executable, str(ROOT / "nixos/checks/synthetic_image.py"),
                       str(d / f"{name}.tar.gz"), name, name])
            ids[name] = out.stdout.strip()
            (d / f"{name}.id").write_text(ids[name] + "\n")
            got = run(["bash", str(pkgs / "image-id.sh"), str(d / f"{name}.tar.gz")])
            check(got.returncode == 0 and got.stdout.strip() == ids[name],
                  f"image-id.sh gives the config's sha256 ({got.stdout.strip()} {got.stderr.strip()})")
            # streamLayeredImage's script: a program that writes the archive, read once.
            stream = d / f"stream-{name}"
            stream.write_text(f"#!/bin/sh\ngzip -dc {d / f'{name}.tar.gz'}\n")
            stream.chmod(0o755)
            got = run(["bash", str(pkgs / "image-id.sh"), "--stream", str(stream)])
            check(got.returncode == 0 and got.stdout.strip() == ids[name],
                  f"image-id.sh --stream gives the same ID from the image's script ({got.stdout.strip()} {got.stderr.strip()})")
        bad_stream = d / "stream-bad"
        bad_stream.write_text("#!/bin/sh\necho not an archive\n")
        bad_stream.chmod(0o755)
        got = run(["bash", str(pkgs / "image-id.sh"), "--stream", str(bad_stream)])
        check(got.returncode != 0 and got.stdout == "",
              f"image-id.sh --stream fails on a program that writes no archive ({got.returncode})")

        # A fake podman: the image store is a file of IDs; every call is recorded.
        store, calls = d / "store", d / "calls"
        fake = d / "podman"
        fake.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {calls}
case "$1 $2" in
  "image exists") grep -qx "$3" {store} ;;
  "load --quiet") cat > /dev/null; echo "$LOADS" >> {store} ;;
  "image inspect") grep -x "${{@: -1}}" {store} ;;
  "images --noheading") sed 's/^/sha256:/' {store} ;;
  "image rm") grep -vx "${{3#sha256:}}" {store} > {store}.new; mv {store}.new {store} ;;
  *) echo "fake podman: $*" >&2; exit 125 ;;
esac
""")
        fake.chmod(0o755)

        def load(archive, idfile, loads, *flags, name="boxmaker-tools"):
            env = dict(os.environ, PODMAN=str(fake), LOADS=loads, XDG_RUNTIME_DIR=str(d))
            return run(["bash", str(pkgs / "load-image.sh"), *flags, str(d / archive), str(d / idfile),
                        name], env=env)

        hex_old, hex_new = ids["old"][7:], ids["new"][7:]
        store.write_text(hex_old + "\n")
        r = load("new.tar.gz", "new.id", hex_new)
        check(r.returncode == 0, f"load-image.sh loads and accepts the pinned image ({r.stderr.strip()})")
        check(store.read_text().split() == [hex_new], "load-image.sh prunes the older image")
        calls.write_text("")
        r = load("new.tar.gz", "new.id", hex_new)
        check(r.returncode == 0 and "load" not in calls.read_text().split(),
              "load-image.sh does not load an image that is already there")
        store.write_text("")
        r = load("new.tar.gz", "old.id", hex_new)
        check(r.returncode == 1 and "did not load as the pinned image" in r.stderr
              and "runbook/runner.md#runner-unavailable" in r.stderr,
              "load-image.sh refuses an image whose ID is not the pinned one")
        (d / "bad.id").write_text("boxmaker-tools:latest\n")
        r = load("new.tar.gz", "bad.id", hex_new)
        check(r.returncode == 1 and "is not sha256:<64 hex>" in r.stderr,
              "load-image.sh refuses a pin that is not an image ID")
        # A toolset's image, from its stream script: loaded through the script's output, its
        # older image pruned, each line naming the toolset.
        store.write_text(hex_old + "\n")
        calls.write_text("")
        r = load("stream-new", "new.id", hex_new, "--stream", "--toolset", "c.1", name="boxmaker-toolset-c-1-0")
        check(r.returncode == 0 and store.read_text().split() == [hex_new]
              and "load --quiet" in calls.read_text() and "reference=boxmaker-toolset-c-1-0" in calls.read_text()
              and "the toolset c.1's image" in r.stdout,
              f"load-image.sh --stream --toolset loads the toolset's image from its script and prunes the older one ({r.stdout!r} {r.stderr!r})")
        store.write_text("")
        r = load("stream-new", "old.id", hex_new, "--stream", "--toolset", "c.1", name="boxmaker-toolset-c-1-0")
        check(r.returncode == 1 and "did not load as the pinned image" in r.stderr
              and "runbook/runner.md#toolset-unavailable" in r.stderr,
              f"load-image.sh --toolset refuses a toolset image whose ID is not the pinned one ({r.stderr.strip()})")
    print("scripts: image-id.sh and load-image.sh, of an archive and of a stream script (--stream)")
    driver_closure()


def script_calls(path):
    """The repository paths a shell script calls through `$here/...`, `here` being its own
    directory (or the one its `here=` line names relative to it)."""
    text = path.read_text()
    m = re.search(r'here=\$\(cd "\$\(dirname "\$0"\)(/[./]*)?" && pwd\)', text)
    if not m:
        return set()
    base = (path.parent / (m.group(1) or "").lstrip("/")).resolve()
    calls = set()
    for rel in re.findall(r'\$here/([A-Za-z0-9_./-]+)', text):
        target = (base / rel).resolve()
        if target.is_file():
            calls.add(target.relative_to(ROOT).as_posix())
        else:
            check(False, f"{path.relative_to(ROOT)} calls $here/{rel}, which is not in the repository")
    return calls


def driver_closure():
    """vm-tests/e2e.nix's `driver` holds every script its scripts call: the NixOS VM test has
    only those files, so a missing one fails there and nowhere here."""
    nix = (ROOT / "vm-tests/e2e.nix").read_text()
    block = nix[nix.index("driver = lib.fileset.toSource"):]
    block = block[:block.index("};")]
    listed = set(re.findall(r"\.\./([A-Za-z0-9_./-]+)", block)) - {"."}
    for p in sorted(listed):
        check((ROOT / p).is_file(), f"vm-tests/e2e.nix's driver lists {p}, which is not in the repository")
    listed = {p for p in listed if (ROOT / p).is_file()}
    todo = sorted(p for p in listed if p.endswith(".sh"))
    seen = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for c in script_calls(ROOT / p):
            check(c in listed, f"{p} calls {c}, which vm-tests/e2e.nix's driver lacks")
            if c.endswith(".sh"):
                todo.append(c)
    print(f"scripts: vm-tests/e2e.nix's driver ({', '.join(sorted(listed))}) holds every script they call")
