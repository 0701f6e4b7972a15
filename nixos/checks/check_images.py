"""`check.py images`: the tools image's two trees and a toolset's, laid out by the Nix
expressions' own scripts over stand-ins for the store paths, each run in a sandbox that sees
only the closure Nix would find."""
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from checklib import ROOT, check, FAILED


def images(packages_json):
    """Lays out the Nix image's trees with the expression's own scripts, over stand-ins."""
    data = json.loads(Path(packages_json).read_text())
    stubs, steps, img = data["stubs"], data["packages"]["toolsImageSteps"], data["packages"]["toolsImage"]
    if not shutil.which("bwrap") or not Path("/bin/busybox").is_file():
        check(False, "images: needs bwrap and a static /bin/busybox (apt-get install bubblewrap busybox-static)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        local = {}

        def stand_in(store_path):
            d = tmp / "store" / Path(store_path).name
            d.mkdir(parents=True, exist_ok=True)
            local[store_path] = d
            return d

        # nixpkgs' busybox: bin/busybox and, as its `make install` with INSTALL_NO_USR puts
        # them, a relative link per applet in bin/ (bin and usr/bin applets) and sbin/.
        bb = stand_in(stubs["busybox"]["path"])
        (bb / "bin").mkdir()
        (bb / "sbin").mkdir()
        shutil.copy2("/bin/busybox", bb / "bin/busybox")
        listed = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True).stdout.split()
        for entry in listed:
            where, name = entry.rsplit("/", 1) if "/" in entry else ("", entry)
            if name == "busybox" or where not in ("bin", "usr/bin", "sbin", "usr/sbin"):
                continue
            into, target = ("sbin", "../bin/busybox") if where.endswith("sbin") else ("bin", "busybox")
            if not (bb / into / name).exists():
                os.symlink(target, bb / into / name)
        for key in ("curl", "toolkit"):
            d = stand_in(stubs[key]["path"])
            (d / "bin").mkdir()
            for prog in stubs[key]["programs"]:
                shutil.copy2("/bin/true", d / "bin" / prog)
        ca = stand_in(stubs["caCertificates"]["path"])
        for f in stubs["caCertificates"]["files"]:
            (ca / f).parent.mkdir(parents=True, exist_ok=True)
            (ca / f).write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")

        def localise(text):
            for store_path, d in sorted(local.items(), key=lambda kv: -len(kv[0])):
                text = text.replace(store_path, str(d))
            return text

        # The expression's runCommand scripts, as stdenv runs them (bash, set -eu -o pipefail).
        for step in steps:
            out = tmp / "store" / Path(step["out"]).name
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", localise(step["script"])],
                               env={"PATH": os.environ["PATH"], "out": str(out)},
                               capture_output=True, text=True)
            check(r.returncode == 0, f"images: the {step['name']} build script runs ({r.stderr.strip()})")
            if r.returncode != 0:
                return
            local[step["out"]] = out
        r = subprocess.run([str(ROOT / "images/check-programs.sh"), str(local[img["root"]])],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: the bwrap tools root (tools-image.nix's root) {r.stderr.strip()}")
        # The Debian builder (images/build-tools-image.sh) links every applet `busybox --list`
        # names into /bin: the Nix tree, laid out over the same busybox, must have the same.
        # Its own step, from `applets=$(` to the check after it, run over an empty /bin.
        src = (ROOT / "images/build-tools-image.sh").read_text()
        loop = src[src.index("applets=$("):src.index('[ -L "$new/bin/sh" ]')]
        deb = tmp / "debian"
        (deb / "bin").mkdir(parents=True)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", loop], env={**os.environ, "new": str(deb)},
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: build-tools-image.sh's applet links are made ({r.stderr.strip()})")
        debian = {e.name for e in (deb / "bin").iterdir()} | {"busybox", "toolkit", "curl"}
        nix = {e.name for e in (local[img["root"]] / "bin").iterdir()}
        check(nix == debian, f"images: the Nix tree's /bin is the Debian builder's: only in Nix "
                             f"{sorted(nix - debian)}, only in Debian's {sorted(debian - nix)}")

        # The layered image: its contents joined as symlinkJoin (lndir) joins them (a file
        # becomes a link to its store path, a link keeps its text), then extraCommands in its
        # root, with the store paths present as they are in the build and in the image.
        image_root = tmp / "image"
        image_root.mkdir()
        for content in img["contents"]:
            src = local[content]
            for dirpath, dirnames, filenames in os.walk(src):
                rel = Path(dirpath).relative_to(src)
                (image_root / rel).mkdir(parents=True, exist_ok=True)
                for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                    at = Path(dirpath) / name
                    dest = image_root / rel / name
                    if dest.exists() or dest.is_symlink():
                        continue
                    os.symlink(os.readlink(at) if at.is_symlink() else str(Path(content) / rel / name), dest)
        binds = []
        for store_path, d in local.items():
            binds += ["--ro-bind", str(d), store_path]
            (image_root / store_path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["bwrap", "--bind", "/", "/", "--tmpfs", "/nix", *binds, "--chdir", str(image_root),
                            "bash", "-euo", "pipefail", "-c", img["extraCommands"]],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: the layered image's extraCommands run in its root ({r.stderr.strip()})")
        if r.returncode != 0:
            return
        bind_args = [a for store_path, d in local.items() for a in ("--bind", str(d), store_path)]
        r = subprocess.run([str(ROOT / "images/check-programs.sh"), str(image_root), *bind_args],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: the layered image's root {r.stderr.strip()}")
        if not FAILED:
            print("images: the bwrap tools root and the layered image's root, as tools-image.nix lays them out, "
                  "hold every program of images/programs.txt in /bin")
            toolset_trees(data, tmp, local, stand_in, localise)


def references(paths, store):
    """The store paths `paths` refer to, themselves included, transitively, as Nix finds a
    closure: a store path named in a file's bytes or in a link's target."""
    pattern = re.compile(re.escape(str(store).encode()) + rb"/([^/\s'\"]+)")
    seen, todo = set(), [Path(p) for p in paths]
    while todo:
        p = todo.pop()
        if p in seen or not (p.exists() or p.is_symlink()):
            continue
        seen.add(p)
        entries = [p] if p.is_symlink() or p.is_file() else []
        if p.is_dir() and not p.is_symlink():
            for dirpath, dirnames, filenames in os.walk(p):
                entries += [Path(dirpath) / n for n in dirnames + filenames]
        for e in entries:
            if e.is_symlink():
                text = os.readlink(e).encode()
            elif e.is_file():
                text = e.read_bytes()
            else:
                continue
            todo += [store / m.decode() for m in pattern.findall(text)]
    return seen


def in_toolset_sandbox(top, closure, script):
    """Runs `script` with busybox's sh as a bwrap sandbox of brokerd's over a toolset would:
    the tree's top-level entries at /, its own /tmp, and each store path of `closure`
    read-only at its own path; nothing else of the host."""
    args = ["bwrap", "--tmpfs", "/"]
    for e in sorted(Path(top).iterdir()):
        if e.name not in ("tmp", "proc", "dev"):
            args += ["--ro-bind", str(e), f"/{e.name}"]
    args += ["--tmpfs", "/tmp"]
    for p in sorted(closure):
        args += ["--ro-bind", str(p), str(p)]
    args += ["--proc", "/proc", "--dev", "/dev", "--unshare-all", "--die-with-parent",
             "--clearenv", "--setenv", "PATH", "/bin", "/bin/sh", "-c", script]
    return subprocess.run(args, capture_output=True, text=True)




# What every toolset must hold, run inside it: the packages' programs and toolkit run through
# their links (into the bound closure), /bin/sh is busybox's, and its own /etc is there.
TOOLSET_PROBE = """
set -e
for p in git make toolkit busybox sh ls cat sed readlink; do
    [ -x "/bin/$p" ] || { echo "no /bin/$p"; exit 1; }
done
[ "$(readlink /bin/sh)" = busybox ] || { echo "/bin/sh is $(readlink /bin/sh)"; exit 1; }
git; make; toolkit
/bin/sh -c 'echo sh ran'
for f in passwd group hosts resolv.conf ssl/certs/ca-certificates.crt; do
    [ -f "/etc/$f" ] || { echo "no /etc/$f"; exit 1; }
done
grep -q '^root:x:0:0:' /etc/passwd && grep -q '^nobody:x:65534:' /etc/passwd
"""


def toolset_trees(data, tmp, local, stand_in, localise):
    """A toolset as images/toolset.nix builds it (git and make, over stand-ins that are shell
    scripts saying their name): its bwrap root and its layered image's root, laid out by the
    expression's own scripts, each run as a sandbox that sees the tree and, for the root,
    exactly the closure Nix would find for it (store-paths), nothing else of the store."""
    ts, stubs = data["packages"]["toolset"], data["stubs"]
    store = tmp / "store"
    for key in ("gitMinimal", "gnumake", "toolkit"):
        d = stand_in(stubs[key]["path"])
        (d / "bin").mkdir(exist_ok=True)
        for prog in stubs[key]["programs"]:
            f = d / "bin" / prog
            f.unlink(missing_ok=True)
            f.write_text(f"#!/bin/sh\necho ran {prog}\n")
            f.chmod(0o755)
    # The buildEnv of their bin/ (pathsToLink = /bin): a link per program.
    check(ts["env"]["pathsToLink"] == ["/bin"], f"images: the toolset's buildEnv links bin/ alone ({ts['env']})")
    env = stand_in(ts["env"]["path"])
    (env / "bin").mkdir()
    for pkg in ts["env"]["paths"]:
        for f in sorted((local[pkg] / "bin").iterdir()):
            os.symlink(str(f), env / "bin" / f.name)
    for step in ts["steps"]:
        out = store / Path(step["out"]).name
        if step["out"] in local:
            continue
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", localise(step["script"])],
                           env={"PATH": os.environ["PATH"], "out": str(out)},
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: the toolset's {step['name']} build script runs ({r.stderr.strip()})")
        if r.returncode != 0:
            return
        local[step["out"]] = out

    # bwrap: the root, with the closure of its root path (closureInfo's rootPaths) alone.
    root = local[ts["root"]]
    check(ts["closureRoots"] == [ts["root"]], f"images: the toolset's store_paths is its root's closure ({ts['closureRoots']})")
    check(not (root / "nix").exists() and not (root / "nix").is_symlink(), "images: the toolset's root has no top-level nix")
    bad = [str(p) for p in root.rglob("*") if p.is_symlink() and os.readlink(p).startswith("/")
           and not os.readlink(p).startswith(str(store) + "/")]
    check(bad == [], f"images: every absolute link of the toolset's root points into the store ({bad})")
    closure = references([root], store)
    names = sorted(p.name.split("-", 1)[1] for p in closure)
    r = in_toolset_sandbox(root, closure, TOOLSET_PROBE)
    want = ["ran git", "ran make", "ran toolkit", "sh ran"]
    check(r.returncode == 0 and r.stdout.split("\n")[:4] == want,
          f"images: the toolset's bwrap root runs git, make, toolkit and busybox's sh with only its closure "
          f"({', '.join(names)}) bound (exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()})")
    check(any(n.startswith("boxmaker-busybox-bin") for n in names) and any(n.endswith("-env") for n in names)
          and not any(n.endswith("-bin") and "toolset" in n for n in names),
          f"images: the root's closure holds busybox and the buildEnv, not the bin it was copied from ({names})")

    # Podman: the image's root, its contents joined as symlinkJoin (lndir) joins them, then
    # extraCommands in it; the image holds every store path its root refers to.
    image_root = tmp / "toolset-image"
    image_root.mkdir()
    for content in ts["image"]["contents"]:
        src = local[content]
        for dirpath, dirnames, filenames in os.walk(src):
            rel = Path(dirpath).relative_to(src)
            (image_root / rel).mkdir(parents=True, exist_ok=True)
            for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                at, dest = Path(dirpath) / name, image_root / rel / name
                if not (dest.exists() or dest.is_symlink()):
                    os.symlink(os.readlink(at) if at.is_symlink() else str(at), dest)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", localise(ts["image"]["extraCommands"])],
                       cwd=image_root, capture_output=True, text=True)
    check(r.returncode == 0, f"images: the toolset image's extraCommands run in its root ({r.stderr.strip()})")
    if r.returncode != 0:
        return
    # The store paths the image's root leads to: the layers the image holds (its root's own
    # entries are not store paths).
    closure = {p for p in references(list(image_root.iterdir()), store) if p.parent == store}
    r = in_toolset_sandbox(image_root, closure, TOOLSET_PROBE)
    check(r.returncode == 0 and r.stdout.split("\n")[:4] == want,
          f"images: the toolset's layered image runs git, make, toolkit and busybox's sh "
          f"(exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()})")
    # The layout's own checks fail a tree without busybox's sh.
    bad_root = tmp / "toolset-bad"
    shutil.copytree(root, bad_root, symlinks=True)
    (bad_root / "bin/sh").unlink()
    os.symlink(str(local[stubs["gitMinimal"]["path"]] / "bin/git"), bad_root / "bin/sh")
    layout = ts["image"]["extraCommands"]
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", layout], cwd=bad_root, capture_output=True, text=True)
    check(r.returncode != 0 and "bin/sh is not busybox's" in r.stderr,
          f"images: a toolset whose /bin/sh is not busybox's fails its build ({r.stderr.strip()})")
    if not FAILED:
        print(f"images: the toolset {ts['imageName']} (git, make), as its bwrap root with only its closure "
              f"({len(names)} store paths) and as its layered image's root, runs its programs, toolkit and busybox's sh")
