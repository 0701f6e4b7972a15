#!/usr/bin/env python3
"""The Nix side's checks that run without a Nix build (make nix-check):

    check.py lock FLAKE-INPUTS-JSON      flake.lock is JSON version 7, its root inputs are
                                         flake.nix's, each locked node complete
    check.py outputs OUTPUTS-JSON        flake.nix's output names (evaluated against a stub
                                         nixpkgs) are the ones the issue asks for
    check.py scripts                     nixos/pkgs/image-id.sh and load-image.sh against a
                                         synthetic archive and a recording fake podman, and
                                         against a script that streams it (--stream)
    check.py module EVAL-JSON [BROKERD]  the evalModules results of eval-module.nix (toolsets
                                         on both backends among them); with a
                                         brokerd binary, `brokerd check-config` on the configs
                                         the module would check at build time
    check.py units                       systemd-analyze verify on dist/systemd's units, alone
                                         and with the bwrap drop-in (any warning about them
                                         fails), and `systemd-analyze security --offline` shows
                                         the drop-in in effect (where systemd has it)
    check.py packages PACKAGES-JSON      the flake's packages as eval-packages.nix evaluated them
                                         against stub-pkgs.nix: nixpkgs' conventions (meta,
                                         tests on with a skip list, built without the release
                                         profile's LTO), and the VM test's script
                                         compiles and names nothing it does not define
    check.py vm-units PACKAGES-JSON      the VM test's units on each node (the module's and the
                                         test's own) in a unit directory: `systemd-analyze
                                         verify multi-user.target` finds no ordering cycle
    check.py suites PACKAGES-JSON        tests/e2e/in-netns.sh's loop over stand-ins for
                                         boxmaker-e2e, and the VM test's suite() over their
                                         outputs: no summary, or a failed count, fails
    check.py vm-checks PACKAGES-JSON     subtests of the VM test over fake nodes: the stranger's
                                         refusal, the bwrap suite's leftovers and the toolset
                                         calls fail for the right reason
    check.py images PACKAGES-JSON        the tools image's two trees (the bwrap root and the
                                         layered image's root) laid out by the expression's own
                                         scripts, with stand-ins for the store paths, hold every
                                         program of images/programs.txt in /bin; a toolset's
                                         root and image root run its programs in a sandbox that
                                         sees only the closure Nix would find for them
"""
import ast
import builtins
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNITS = json.loads((ROOT / "nixos/units.json").read_text())
PLACEHOLDER = "@BOXMAKER_IMAGE_ID@"
FAILED = []


def check(ok, what):
    if not ok:
        FAILED.append(what)
        print(f"  FAIL {what}")


def lock(inputs_json):
    inputs = json.loads(Path(inputs_json).read_text())
    data = json.loads((ROOT / "flake.lock").read_text())
    check(data.get("version") == 7, "flake.lock: version is 7")
    root = data.get("root")
    nodes = data.get("nodes", {})
    check(root in nodes, f"flake.lock: root node {root!r} exists")
    root_inputs = nodes.get(root, {}).get("inputs", {})
    check(sorted(root_inputs) == sorted(inputs),
          f"flake.lock: root inputs {sorted(root_inputs)} are flake.nix's {sorted(inputs)}")
    for name, spec in inputs.items():
        node = nodes.get(root_inputs.get(name), {})
        locked, original = node.get("locked", {}), node.get("original", {})
        m = re.fullmatch(r"github:([^/]+)/([^/]+)(?:/([^?]+))?", spec.get("url", ""))
        check(m is not None, f"flake.nix: input {name} is a github: URL")
        if m:
            want = {"type": "github", "owner": m[1], "repo": m[2]}
            if m[3]:
                want["ref"] = m[3]
            check(original == want, f"flake.lock: {name}.original {original} is flake.nix's {want}")
        check(locked.get("type") == "github" and locked.get("owner") == original.get("owner")
              and locked.get("repo") == original.get("repo"),
              f"flake.lock: {name}.locked names the same repository")
        check(re.fullmatch(r"[0-9a-f]{40}", locked.get("rev", "")) is not None,
              f"flake.lock: {name}.locked.rev is 40 hex digits")
        check(re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", locked.get("narHash", "")) is not None,
              f"flake.lock: {name}.locked.narHash is an SRI sha256")
        check(isinstance(locked.get("lastModified"), int), f"flake.lock: {name}.locked.lastModified")
    print(f"lock: flake.lock version 7, inputs {sorted(inputs)}")


def outputs(outputs_json):
    o = json.loads(Path(outputs_json).read_text())
    for system in ("x86_64-linux", "aarch64-linux"):
        pk = set(o["packages"][system])
        for want in ("brokerd", "boxctl", "toolkit", "tools-image", "tools-image-id", "default"):
            check(want in pk, f"flake: packages.{system}.{want}")
        ch = set(o["checks"][system])
        for want in ("crate-tests", "toolkit-static", "tools-image-id", "units"):
            check(want in ch, f"flake: checks.{system}.{want}")
        if "e2e" in pk:
            check("vm-boxmaker" in ch, f"flake: checks.{system}.vm-boxmaker (packages.e2e exists)")
        check("default" in o["devShells"][system], f"flake: devShells.{system}.default")
    check("default" in o["nixosModules"], "flake: nixosModules.default")
    check("default" in o.get("overlays", []), "flake: overlays.default (pkgs.boxmaker, the module's package)")
    print(f"outputs: packages {sorted(o['packages']['x86_64-linux'])}; "
          f"checks {sorted(o['checks']['x86_64-linux'])}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


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


def fill(v, vals):
    if isinstance(v, str):
        for k, x in vals.items():
            v = v.replace(f"@{k}@", x)
        return v
    if isinstance(v, list):
        return [fill(x, vals) for x in v]
    return v


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def to_toml(settings):
    out = []
    for table in ("broker", "runner", "bwrap"):
        if table in settings:
            out.append(f"[{table}]")
            out += [f"{k} = {toml_value(v)}" for k, v in settings[table].items()]
    for kind in ("grants", "toolsets"):
        for name, table in settings.get(kind, {}).items():
            out.append(f"[{kind}.{json.dumps(name)}]")
            out += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


# The evaluated configurations: their backend and, for bwrap, the cgroup mode.
CONFIGS = {
    "minimal": ("podman", None),
    "noCheck": ("podman", None),
    "full": ("podman", None),
    "seccompBase": ("podman", None),
    "bwrap": ("bwrap", "delegated"),
    "bwrapScope": ("bwrap", "systemd-scope"),
    "userborn": ("podman", None),
    "toolsetsPodman": ("podman", None),
    "toolsetsBwrap": ("bwrap", "delegated"),
}
# A toolset's image ID where the module writes it before the build computes it.
TOOLSET_PLACEHOLDER = re.compile(r"@BOXMAKER_TOOLSET_IMAGE_ID:([A-Za-z0-9_.-]+)@")


def expected_units(backend):
    """units.json's socket and service, with the bwrap section laid over the service."""
    service = {section: dict(settings) for section, settings in UNITS["service"].items()}
    if backend == "bwrap":
        for section, settings in UNITS["bwrap"]["service"].items():
            service.setdefault(section, {}).update(settings)
    return {"socket": UNITS["socket"], "service": service}


def module(eval_json, brokerd=None):
    r = json.loads(Path(eval_json).read_text())
    for name, (backend, cgroup) in CONFIGS.items():
        c = r[name]
        check(c["failedAssertions"] == [], f"module/{name}: no assertion fails {c['failedAssertions']}")
        svc, sock = c["service"]["serviceConfig"], c["socket"]
        brokerd_path = svc["ExecStart"].split("' ", 1)[1].split()[0]
        vals = {
            "user": svc["User"], "group": svc["Group"],
            "client_group": sock["socketConfig"]["SocketGroup"],
            "socket_path": sock["socketConfig"]["ListenStream"],
            "sh": svc["ExecStart"].split()[0], "brokerd": brokerd_path,
            "config": "/etc/boxmaker/brokerd.toml",
            "timeout_stop_s": str(c["settings"]["broker"]["shutdown_grace_s"]
                                  + UNITS["timeout_stop_margin_s"]),
        }
        # The user's manager: Podman's cgroup delegation, or systemd-scope's scopes.
        manager = backend == "podman" or cgroup == "systemd-scope"
        # Every setting of units.json reaches the NixOS units unchanged (filled in).
        # [Unit]'s Description and dependencies go through NixOS's own options.
        service_unit = dict(c["service"]["unitConfig"])
        for key, option in (("Description", "description"), ("Requires", "requires"),
                            ("After", "after"), ("Wants", "wants")):
            check(key not in service_unit, f"module/{name}: service [Unit] {key} through systemd.services.boxmaker.{option}, not unitConfig")
            if c["service"][option] not in ("", []):
                service_unit[key] = c["service"][option]
        for unit, got in (("socket", {"Unit": sock["unitConfig"], "Socket": sock["socketConfig"]}),
                          ("service", {"Unit": service_unit, "Service": svc})):
            for section, settings in expected_units(backend)[unit].items():
                if section == "Install":
                    check(sock["wantedBy"] == settings["WantedBy"], f"module/{name}: socket WantedBy")
                    continue
                for key, want in settings.items():
                    want = fill(want, vals)
                    have = got[section].get(key)
                    if key == "ExecStartPre":
                        have = have[: len(want)]
                        if not manager:
                            want = []
                    check(have == want, f"module/{name}: {unit} [{section}] {key} = {have!r}, units.json says {want!r}")
        pre = svc["ExecStartPre"]
        path = c["service"]["path"]
        u = c["user"]
        check((" check-config " in c["configScript"]) == (name != "noCheck"),
              f"module/{name}: brokerd check-config runs at build time unless checkConfig = false")
        check(len(c["systemPackages"]) == 1 and "boxmaker" in c["systemPackages"][0],
              f"module/{name}: only boxmaker's own package is installed system-wide ({c['systemPackages']})")
        check(u["isSystemUser"] and u["home"] == "/var/lib/boxmaker" and u["createHome"],
              f"module/{name}: the system user and its home")
        check((u["linger"] is True) == manager,
              f"module/{name}: lingering exactly where the user's manager is used ({u['linger']})")
        check(sock["socketConfig"]["SocketMode"] == "0660", f"module/{name}: socket mode 0660")
        runner = c["settings"]["runner"]
        if backend == "podman":
            # The tools image's loader, then one per toolset, each allowed to fail ("-"): a
            # toolset that does not load fails its own check, not brokerd's start.
            loaders = [x for x in pre if "-boxmaker-load-" in x]
            toolsets = c["settings"].get("toolsets", {})
            check(loaders and loaders[0].endswith("-boxmaker-load-image") and pre[-len(loaders):] == loaders
                  and len(loaders) == 1 + len(toolsets)
                  and all(x.startswith("-/nix/store/") for x in loaders[1:]),
                  f"module/{name}: the image, and each toolset's, is loaded and checked before start ({pre})")
            check(path[0] == "/run/wrappers", f"module/{name}: /run/wrappers/bin first on PATH")
            check(c["containers"] is True and c["podmanModule"] is False,
                  f"module/{name}: /etc/containers, without virtualisation.podman's root socket and group")
            check(runner.get("egress_network") == "pasta",
                  f"module/{name}: egress_network written as pasta, NixOS's Podman's ({runner.get('egress_network')})")
            check(u["autoSubUidGidRange"] or (u["subUidRanges"] and u["subGidRanges"]),
                  f"module/{name}: subordinate ID ranges")
            check("bwrap" not in c["settings"], f"module/{name}: no [bwrap] table")
            check(any(t.endswith("-callPackage-tools-image.nix") for t in c["service"]["restartTriggers"]),
                  f"module/{name}: a new image restarts brokerd")
            # The service user's Podman: its containers.conf names the derived seccomp profile.
            conf, profile, home = c["podmanConf"], c["seccompProfilePath"], u["home"]
            check(profile.endswith("-boxmaker-seccomp-nouserns.json")
                  and json.loads(conf.get("boxmaker/containers.conf") or "null")
                  == {"containers": {"seccomp_profile": profile, "log_driver": "none"},
                      "engine": {"events_logger": "none"}},
                  f"module/{name}: /etc/boxmaker/containers.conf names the profile ({conf}, {profile})")
            script = conf.get("boxmaker/seccomp-nouserns.json") or ""
            check(re.search(r'jq -f /nix/store/[^ ]+-seccomp-nouserns\.jq "\$base" >\$out', script) is not None,
                  f"module/{name}: the profile is scripts/seccomp-nouserns.jq over the base ({script!r})")
            check(c["tmpfiles"] == [
                f"d {home}/.config 0700 boxmaker boxmaker -",
                f"d {home}/.config/containers 0700 boxmaker boxmaker -",
                f"L+ {home}/.config/containers/containers.conf - - - - /etc/boxmaker/containers.conf",
            ], f"module/{name}: the user's containers.conf links to /etc/boxmaker/containers.conf ({c['tmpfiles']})")
        else:
            check(not any("load-image" in x for x in pre), f"module/{name}: no image loading")
            check(len(path) == 1 and path[0].endswith("-bubblewrap"),
                  f"module/{name}: bubblewrap alone on the unit's PATH, no wrappers, no Podman ({path})")
            check("egress_network" not in runner, f"module/{name}: no egress_network for bwrap")
            check(c["containers"] is False and c["podmanModule"] is False, f"module/{name}: Podman not enabled")
            check(not u["autoSubUidGidRange"] and not u["subUidRanges"] and not u["subGidRanges"],
                  f"module/{name}: no subordinate ID ranges")
            check("image" not in runner and "podman" not in runner,
                  f"module/{name}: no runner.image or runner.podman in the config ({sorted(runner)})")
            check(c["settings"].get("bwrap", {}).get("cgroup") == cgroup
                  and c["settings"]["bwrap"].get("tools_root", "").startswith("/"),
                  f"module/{name}: [bwrap] tools_root and cgroup = {cgroup!r} ({c['settings'].get('bwrap')})")
            check(len(c["service"]["restartTriggers"]) == 1,
                  f"module/{name}: only the config restarts brokerd (it names the tools root)")
            check("image-id" not in c["configScript"], f"module/{name}: no image ID computed")
            check(c["podmanConf"] == {} and c["tmpfiles"] == [],
                  f"module/{name}: no Podman configuration for the service user")
    check(r["minimal"]["settings"]["runner"]["image"] == PLACEHOLDER,
          "module/minimal: the image ID is filled in at build time")
    check(r["full"]["user"]["subUidRanges"] == [{"startUid": 200000, "count": 65536}],
          "module/full: explicit subordinate range")
    check(r["full"]["service"]["serviceConfig"]["TimeoutStopSec"] == "75",
          "module/full: TimeoutStopSec follows shutdown_grace_s")
    project = r["full"]["settings"]["grants"].get("project", {})
    check((project.get("writes"), project.get("approvals"), project.get("protect")) == ("staged", "owner", "classifier")
          and r["full"]["settings"]["grants"]["notes"].get("writes") == "direct",
          f"module/full: a grant's writes, approvals and protect reach the config ({project})")
    notes = r["full"]["settings"]["grants"]["notes"]
    check(notes.get("shell_hosts") == ["crates.io", "*.crates.io"] and "toolset" not in notes
          and project.get("shell_hosts") == [],
          f"module/full: a grant's shellHosts reach the config as shell_hosts, no toolset unless named ({notes})")
    check("cache" not in notes and "max_cache_bytes" not in notes
          and project.get("cache") is True and project.get("max_cache_bytes") == 4294967296,
          f"module/full: a grant's cache and maxCacheBytes reach the config only when set ({notes}, {project})")
    check(r["full"]["sandboxSettings"]["broker"].get("owners") == [0]
          and r["minimal"]["sandboxSettings"]["broker"].get("owners") == [],
          "module: the build-time check names uid 0 as the owner where there are owners")
    check(r["bwrap"]["settings"]["bwrap"]["tools_root"].endswith("-callPackage-tools-image.nix-root"),
          "module/bwrap: the tools root defaults to the tools image's .root")
    check(r["bwrapScope"]["settings"]["bwrap"]["tools_root"] == "/var/lib/boxmaker/tools-root",
          "module/bwrapScope: an operator's tools root")
    check("find /nix/store/00000000000000000000000000000000-podman-src/vendor -path '*/common/pkg/seccomp/seccomp.json'"
          in r["minimal"]["podmanConf"]["boxmaker/seccomp-nouserns.json"],
          "module/minimal: the base profile is the one in Podman's own source")
    check("base=/etc/containers/seccomp.json\n" in r["seccompBase"]["podmanConf"]["boxmaker/seccomp-nouserns.json"],
          "module/seccompBase: an operator's base profile")
    check(r["disabled"] == {"failedAssertions": [], "services": []}, "module/disabled: nothing")
    toolsets_checks(r)
    # userborn writes no /etc/subuid: the module writes the service user's range, beside what
    # other modules write.
    for f in ("subuid", "subgid"):
        got = r["userborn"][f] or ""
        check(sorted(got.split()) == ["boxmaker:400000:65536"] + (["builder:500000:65536"] if f == "subuid" else []),
              f"module/userborn: /etc/{f} holds the service user's range ({got!r})")
        # newuidmap opens /etc/subuid with O_NOFOLLOW: a link into /etc/static is refused.
        check(r["userborn"][f + "Mode"] == "0644",
              f"module/userborn: /etc/{f} is a file (mode 0644), not a symlink ({r['userborn'][f + 'Mode']!r})")
        check(r["minimal"][f] is None, f"module/minimal: /etc/{f} left to NixOS's own users module")
    # The host's own mode, or its own file (with mkForce), without a conflict.
    own = r["userbornOwnMode"]
    check(own["failedAssertions"] == [] and own["subuidMode"] == "0600" and own["subgidMode"] == "0644",
          f"module/userbornOwnMode: the host's mode wins ({own['subuidMode']}, {own['subgidMode']})")
    own = r["userbornOwnSource"]
    check(own["failedAssertions"] == [] and own["subuidSource"].endswith("-subuid")
          and "etc-subuid" not in own["subuidSource"],
          f"module/userbornOwnSource: the host's own /etc/subuid wins ({own['subuidSource']})")
    # userborn 1.0 writes them from the user's options: the module is no second writer.
    for name, ranges in (("userborn1", []), ("userborn1Range", [{"startUid": 400000, "count": 65536}])):
        c = r[name]
        check(c["failedAssertions"] == [] and c["subuid"] is None and c["subgid"] is None
              and c["user"]["subUidRanges"] == ranges
              and c["user"]["autoSubUidGidRange"] == (ranges == []),
              f"module/{name}: userborn 1.0 writes the sub-IDs from the user's options, the module "
              f"writes no /etc/subuid ({c['failedAssertions']}, {c['subuid']!r}, {c['user']['subUidRanges']})")
    # nixpkgs' conventions for options: literalExpression holds Nix only (prose is literalMD),
    # the package's default names what exists, checkConfig follows the platforms, and the
    # user and group are declared only under the module's own names.
    for o in r["docs"]:
        for key in ("defaultText", "example"):
            v = o[key]
            if isinstance(v, dict) and v.get("_type") == "literalExpression":
                res = run(["nix-instantiate", "--store", "dummy://", "--readonly-mode", "--parse", "-E", f"let config = 0; pkgs = 0; lib = 0; boxmaker = 0; in (\n{v['text']}\n)"])
                check(res.returncode == 0, f"module/docs: {o['name']} {key} is Nix, or literalMD ({v['text']!r})")
    docs = {o["name"]: o for o in r["docs"]}
    pkg = (docs["services.boxmaker.package"]["defaultText"] or {}).get("text", "")
    check("overlays.default" in pkg, f"module/docs: the package's defaultText names the flake's overlay ({pkg!r})")
    cc = (docs["services.boxmaker.checkConfig"]["defaultText"] or {}).get("text", "")
    check(cc == "pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform",
          f"module/docs: checkConfig defaults to whether the build can run the host's programs ({cc!r})")
    own = r["ownUser"]
    check(own["user"]["isSystemUser"] is False and "svc" not in own["groups"],
          f"module/ownUser: a user and group of the host's own names are not declared ({own['user']['isSystemUser']}, {own['groups']})")
    # toolsImageId is checked at build time against the ID computed from the image.
    script = r["full"]["imageIdScript"] or ""
    computed = re.search(r"\$\(cat (/nix/store/\S+/image-id)\)", script)
    check(r["minimal"]["imageIdScript"] is None and computed is not None,
          f"module/full: toolsImageId goes through a build-time check ({script!r})")
    pinned = "sha256:" + "ab" * 32
    for got, ok in ((pinned, True), ("sha256:" + "cd" * 32, False)) if computed else ():
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "image-id").write_text(got + "\n")
            res = run(["sh", "-c", script.replace(computed.group(1), f"{d}/image-id")],
                      env={**os.environ, "out": f"{d}/out"})
            wrote = (Path(d) / "out").read_text() if (Path(d) / "out").exists() else None
            check((res.returncode == 0) == ok and (wrote == pinned + "\n") == ok
                  and (ok or "is not the ID of services.boxmaker.toolsImage, which is " + got in res.stderr),
                  f"module/full: the image ID check {'passes' if ok else 'fails the build'} when the image's ID is {got} ({res.stderr.strip()})")
    check(r["bwrapUserborn"] == [], f"module/bwrapUserborn: bwrap needs no range ({r['bwrapUserborn']})")
    for name, b in r["bad"].items():
        check(any(b["expect"] in m for m in b["failed"]),
              f"module/bad/{name}: an assertion says {b['expect']!r} (got {b['failed']})")
    print(f"module: {', '.join(CONFIGS)} evaluate; {len(r['bad'])} bad configurations are refused")

    if not brokerd:
        print("module: no brokerd binary given; brokerd check-config of the generated configs skipped")
        return
    # The module's option defaults restate brokerd's: each value the module writes where the
    # operator set nothing must be what brokerd itself would take.
    res = run([brokerd, "defaults"])
    check(res.returncode == 0, f"brokerd defaults: {res.stderr.strip()}")
    defaults = json.loads(res.stdout or "{}")
    # What differs on purpose (the module's tools root is the tools image's own), and what the
    # configs of eval-module.nix set themselves.
    differs = {"bwrap.tools_root"}
    set_here = {("bwrap", "grants.notes.mode")}
    compared = 0
    for name in ("minimal", "bwrap"):
        s = r[name]["settings"]
        for table in ("broker", "runner", "bwrap"):
            for k, v in s.get(table, {}).items():
                if (k in defaults.get(table, {}) and f"{table}.{k}" not in differs
                        and not (table == "runner" and k == "backend")):
                    compared += 1
                    check(v == defaults[table][k],
                          f"module/{name}: {table}.{k} defaults to {v!r}, brokerd's default is {defaults[table][k]!r}")
        for g, grant in s.get("grants", {}).items():
            for k, v in grant.items():
                if k in defaults["grant"] and (name, f"grants.{g}.{k}") not in set_here:
                    compared += 1
                    check(v == defaults["grant"][k],
                          f"module/{name}: grants.{g}.{k} defaults to {v!r}, brokerd's default is {defaults['grant'][k]!r}")
    module_text = (Path(__file__).resolve().parents[1] / "module.nix").read_text()
    ident = f'builtins.match "[{defaults["ident"]["chars"]}]{{1,{defaults["ident"]["max"]}}}" name'
    check(ident in module_text, f"module: grant names are checked as brokerd checks identifiers ({ident})")
    check(compared >= 10, f"module: {compared} defaults compared with brokerd's")
    print(f"module: {compared} option defaults are brokerd's own, and grant names follow its identifier rule")
    # As the build does (nixos/module.nix, configFile): the image ID filled in, and every grant
    # directory made empty under a root that stands for the placeholder.
    fake_id = "sha256:" + "0" * 64
    for name in CONFIGS:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d) / "grant-dirs"
            root.mkdir()
            for g in r[name]["settings"].get("grants", {}).values():
                for p in g.get("paths", []):
                    (root / p["path"].lstrip("/")).mkdir(parents=True, exist_ok=True)
            text = (to_toml(r[name]["sandboxSettings"]).replace(PLACEHOLDER, fake_id)
                    .replace("@BOXMAKER_SANDBOX_ROOT@", str(root)))
            text = TOOLSET_PLACEHOLDER.sub(lambda m: "sha256:" + hashlib.sha256(m[1].encode()).hexdigest(), text)
            (Path(d) / "sandbox.toml").write_text(text)
            res = run([brokerd, "check-config", "--placeholder-grant-dirs", str(Path(d) / "sandbox.toml")])
            check(res.returncode == 0,
                  f"module/{name}: brokerd check-config accepts the build-time config: {res.stderr.strip()}\n{text}")
    print(f"module: brokerd check-config accepts the configs the module checks at build time ({', '.join(CONFIGS)})")


def toolsets_checks(r):
    """services.boxmaker.toolsets, two toolsets sharing a package, on each backend: the config
    names each by what its backend runs (an image ID filled in at build time for Podman, a tree
    and its closure's store-paths for bwrap) and nothing the other backend would need, the
    Podman images are loaded by their IDs, and the grants name their toolsets."""
    pod, bw = r["toolsetsPodman"], r["toolsetsBwrap"]
    names = ["c", "docs.v2"]
    for c in (pod, bw):
        ts = c["toolsets"]
        check(sorted(ts) == names and "git" in ts["c"]["packages"] and "git" in ts["docs.v2"]["packages"],
              f"module/toolsets: two toolsets sharing a package ({ {n: t['packages'] for n, t in ts.items()} })")
        grants = c["settings"]["grants"]
        check((grants["build"].get("toolset"), grants["docs"].get("toolset")) == ("c", "docs.v2")
              and "toolset" not in grants["plain"],
              f"module/toolsets: each grant names its toolset, the base one's none ({grants})")
        # Podman's names for the images: distinct, valid image names.
        image_names = [t["imageName"] for t in ts.values()]
        check(len(set(image_names)) == 2 and all(
            re.fullmatch(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*", n) for n in image_names),
              f"module/toolsets: each image has a name of its own that Podman accepts ({image_names})")
        # Each toolset's bwrap closure is its own root's.
        for n, t in ts.items():
            check(t["closureRoots"] == [t["root"]] and t["storePaths"].endswith("-closure-info/store-paths"),
                  f"module/toolsets: {n}'s store_paths is the closure of its root ({t['closureRoots']}, {t['storePaths']})")
        check(ts["c"]["storePaths"] != ts["docs.v2"]["storePaths"] and ts["c"]["root"] != ts["docs.v2"]["root"],
              "module/toolsets: each toolset has its own root and closure")

    # Podman: image = the computed ID, nothing of bwrap's; each ID from its own image.
    settings, ts = pod["settings"]["toolsets"], pod["toolsets"]
    check(settings == {n: {"image": f"@BOXMAKER_TOOLSET_IMAGE_ID:{n}@"} for n in names},
          f"module/toolsetsPodman: [toolsets.NAME] image = the ID computed at build time, no tree ({settings})")
    ids = {i["placeholder"]: i["file"] for i in pod["imageIds"]}
    script = pod["fillScript"] or ""
    for n in names:
        t = ts[n]
        placeholder = f"@BOXMAKER_TOOLSET_IMAGE_ID:{n}@"
        check(ids.get(placeholder) == t["idFile"] and t["idFile"].endswith(f"-{t['imageName']}-id/image-id"),
              f"module/toolsetsPodman: {n}'s ID is read from its own image's ID file ({ids.get(placeholder)})")
        m = re.search(rf"^(id\d+)=\$\(cat {re.escape(t['idFile'])}\)$", script, re.M)
        check(m is not None and f"--replace-quiet '{placeholder}' \"${m[1]}\"" in script,
              f"module/toolsetsPodman: the config's {n} placeholder is replaced by that ID ({script!r})")
        check(re.fullmatch(rf"mkdir -p \$out\nbash /nix/store/\S+-image-id\.sh --stream {re.escape(t['image'])} "
                           r"> \$out/image-id\ncat \$out/image-id\n", t["imageIdScript"]) is not None
              and t["image"].endswith(f"-stream-{t['imageName']}"),
              f"module/toolsetsPodman: {n}'s ID is computed at build time from its streamed image ({t['imageIdScript']!r})")
        check(f"--stream --toolset {n} \\\n  {t['image']} {t['idFile']} {t['imageName']}\n" in t["loaderText"]
              and "-load-image.sh" in t["loaderText"] and f"-{t['loader']}" in pod["service"]["serviceConfig"]["ExecStartPre"],
              f"module/toolsetsPodman: {n}'s image is loaded by load-image.sh --stream and checked against its ID ({t['loaderText']!r})")
    check(len(pod["imageIds"]) == 3 and pod["imageIds"][0]["placeholder"] == PLACEHOLDER,
          f"module/toolsetsPodman: the tools image's ID and each toolset's are filled in ({pod['imageIds']})")

    # bwrap: tree and store_paths, no image, nothing loaded, no ID computed.
    settings, ts = bw["settings"]["toolsets"], bw["toolsets"]
    check(settings == {n: {"tree": ts[n]["root"], "store_paths": ts[n]["storePaths"]} for n in names},
          f"module/toolsetsBwrap: [toolsets.NAME] tree and store_paths, no image ({settings})")
    check(bw["imageIds"] == [] and bw["fillScript"] is None,
          f"module/toolsetsBwrap: no image ID is computed ({bw['imageIds']})")
    # Nothing without toolsets: no [toolsets] in the config.
    check("toolsets" not in r["minimal"]["settings"] and r["minimal"]["toolsets"] == {},
          "module/minimal: no [toolsets] table without toolsets")
    if not FAILED:
        print("module: toolsets on Podman (image by the ID computed at build time, loaded with --stream) "
              "and on bwrap (tree and store_paths), each grant on its own")


def units():
    """The dist units as systemd reads them: in a directory of their own, as they are installed
    (systemd-analyze loads <dir>/boxmaker.service.d/*.conf with the service)."""
    if shutil.which("systemd-analyze") is None:
        print("units: no systemd-analyze here; verify skipped")
        return
    dist = ROOT / "dist/systemd"
    dropin = UNITS["bwrap"]["dropin"]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name in ("boxmaker.socket", "boxmaker.service"):
            shutil.copy(dist / name, d / name)
        paths = [str(d / "boxmaker.socket"), str(d / "boxmaker.service")]

        def verify(what):
            # Unknown keys and bad values are only warnings (exit 0): any line naming our
            # files fails the check; other lines are the host's own.
            r = run(["systemd-analyze", "verify", *paths], cwd=d)
            ours = [l for l in (r.stdout + r.stderr).splitlines() if str(d) in l or "boxmaker" in l]
            check(r.returncode == 0 and not ours,
                  f"units: systemd-analyze verify accepts {what} (exit {r.returncode}): {ours or r.stderr.strip()}")

        def security():
            r = run(["systemd-analyze", "security", "--offline=true", "--json=short",
                     str(d / "boxmaker.service")], cwd=d)
            if r.returncode != 0 or not r.stdout.startswith("["):
                return None
            return {x["json_field"]: x["set"] for x in json.loads(r.stdout)}

        verify("boxmaker.socket and boxmaker.service")
        podman = security()
        (d / dropin).parent.mkdir()
        shutil.copy(dist / dropin, d / dropin)
        verify(f"boxmaker.service with {dropin}")
        bwrap = security()
        if podman is None or bwrap is None:
            print("units: systemd-analyze verify accepts the units and the drop-in "
                  "(this systemd has no security --offline: the drop-in's effect is not shown)")
            return
        # "set" is True where the unit is safe in that respect.
        want = {
            "NoNewPrivileges": (False, True),
            "Delegate": (True, False),
            "CapabilityBoundingSet_CAP_SET_UID_GID_PCAP": (False, True),
            "CapabilityBoundingSet_CAP_SYS_ADMIN": (True, True),
            "RestrictNamespaces_user": (False, False),
            "PrivateUsers": (False, False),
        }
        for field, (p, b) in want.items():
            check(podman.get(field) == p, f"units: boxmaker.service alone: {field} is {podman.get(field)}, want {p}")
            check(bwrap.get(field) == b, f"units: with {dropin}: {field} is {bwrap.get(field)}, want {b}")
    if FAILED:
        return
    print(f"units: systemd-analyze verify accepts the units alone and with {dropin}; "
          f"security --offline shows the drop-in in effect ({', '.join(want)})")


# What the NixOS test driver gives a test script besides its own names.
DRIVER_GLOBALS = {"start_all", "subtest", "machines", "driver", "log", "join_all", "serial_stdout_on",
                  "serial_stdout_off", "retry", "polling_condition", "create_machine", "vlans",
                  "t", "os", "Machine"}


def scenario_count():
    """The entries of the scenario table in tests/e2e/src/scenarios.rs."""
    text = (ROOT / "tests/e2e/src/scenarios.rs").read_text()
    table = text.split("let scenarios", 1)[1].split("];", 1)[0]
    return table.count("Suite::")


# Stand-ins for `boxmaker-e2e run` on podman: what each prints and its status, and whether the
# suite must count it as passed.
STAND_INS = [
    ("exits 0 and prints nothing", "", 0, False),
    ("prints 3 passed, 1 failed and exits 0", "podman: 3 passed, 1 failed", 0, False),
    ("prints 0 failed but exits 1", "podman: 3 passed, 0 failed", 1, False),
    ("prints 3 passed, 0 failed", "podman: 3 passed, 0 failed", 0, True),
]


def suites(packages_json):
    """The suite's verdicts where a run printed no summary or a failed count: the loop of
    tests/e2e/in-netns.sh (tests/e2e/suite-tally.sh) over stand-ins for `boxmaker-e2e`, and
    the VM test's suite() over the same outputs."""
    tally = ROOT / "tests/e2e/suite-tally.sh"
    with tempfile.TemporaryDirectory() as d:
        for what, prints, status, passes in STAND_INS:
            e2e = Path(d) / "boxmaker-e2e"
            e2e.write_text(f"#!/bin/sh\n{'echo ' + shlex.quote(prints) if prints else ':'}\nexit {status}\n")
            e2e.chmod(0o755)
            work = Path(d) / "work"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            r = run(["bash", "-c", 'set -euo pipefail; backends=podman; work=$1; e2e=$2; '
                     'run_backend() { "$e2e" run --backend "$1"; }; . "$3"; run_suites',
                     "tally", str(work), str(e2e), str(tally)])
            check((r.returncode == 0) == passes,
                  f"suites: in-netns.sh's loop {'passes' if passes else 'fails'} a run that {what} "
                  f"(exit {r.returncode}: {r.stdout.strip()!r})")

    vm = json.loads(Path(packages_json).read_text())["vmTest"]
    fn = next((n for n in ast.parse(vm["testScript"]).body
               if isinstance(n, ast.FunctionDef) and n.name == "suite"), None)
    if fn is None:
        check(False, "suites: the VM test's script defines suite()")
        return
    n = scenario_count()

    class Host:
        def __init__(self, out):
            self.out = out

        def succeed(self, cmd):
            return self.out

    # The stand-ins' outputs as in-netns.sh prints them (its total last); the VM test fails
    # each, the last one too: 3 is fewer than the suite's scenarios.
    cases = [(what, f"{prints}\n{prints.split(': ')[1]}\n" if prints else "", False)
             for what, prints, status, _ in STAND_INS if status == 0]
    cases.append((f"prints {n} passed, 0 failed", f"ok podman/x\npodman: {n} passed, 0 failed\n{n} passed, 0 failed\n", True))
    for what, out, passes in cases:
        scope = {"re": re, "host": Host(out), "print": lambda *a: None}
        exec(compile(ast.Module(body=[fn], type_ignores=[]), "testScript", "exec"), scope)
        try:
            scope["suite"]("true", "podman")
            ok = True
        except AssertionError:
            ok = False
        check(ok == passes, f"suites: the VM test's suite() {'passes' if passes else 'fails'} a run that {what}")
    if not FAILED:
        print(f"suites: in-netns.sh's loop and the VM test's suite() fail a run without a summary or "
              f"with a failed scenario, and the VM test wants at least {n} passed per backend")


class FakeNode:
    """A VM test node whose commands answer from a table: the first pattern a command contains
    gives its output ("" for none). fail() raises unless the answer is a failure (None: the
    command failed with no output; a str tuple: failed with that output)."""

    def __init__(self, answers):
        self.answers = answers

    def _answer(self, cmd):
        return next((out for pat, out in self.answers if pat in cmd), "")

    def succeed(self, cmd):
        out = self._answer(cmd)
        if out is None or isinstance(out, tuple):
            raise AssertionError(f"command failed: {cmd}")
        return out

    def fail(self, cmd):
        out = self._answer(cmd)
        if out is None:
            return ""
        if isinstance(out, tuple):
            return out[0]
        raise AssertionError(f"command succeeded: {cmd}")

    def execute(self, cmd):
        out = self._answer(cmd)
        return (1, "") if out is None else (1, out[0]) if isinstance(out, tuple) else (0, out)


def vm_checks(packages_json):
    """Subtests of the VM test that must fail for the right reason, run over fake nodes: the
    stranger's refusal must be the socket's "Permission denied" with brokerd not started, and
    the leftover check after the suite on bwrap must see bwrap's leftovers (scopes and sandbox
    groups in the service user's manager), not Podman's."""
    vm = json.loads(Path(packages_json).read_text())["vmTest"]
    tree = ast.parse(vm["testScript"])
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.Import))]
    subtests = {}
    for n in tree.body:
        if isinstance(n, ast.With):
            call = n.items[0].context_expr
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "subtest":
                subtests[call.args[0].value] = n.body

    class Time:
        @staticmethod
        def sleep(_):
            pass

    def outcome(title, host):
        body = subtests.get(title)
        if body is None:
            return f"no subtest {title!r}"
        scope = {"host": host, "bwrapHost": host, "print": lambda *a: None}
        exec(compile(ast.Module(body=defs + body, type_ignores=[]), "testScript", "exec"), scope)
        return "passed"

    def run_subtest(title, host):
        try:
            return outcome(title, host)
        except AssertionError as e:
            return f"failed: {e}"

    stranger = "a user outside the client group cannot connect"
    refused = "boxctl: cannot connect to /run/boxmaker/broker.sock: Permission denied (os error 13)"
    for what, boxctl, active, passes in (
        ("refused by the socket's mode, brokerd inactive", (refused,), None, True),
        ("failing for another reason", ("boxctl: no such file or directory",), None, False),
        ("refused, but brokerd started", (refused,), "active", False),
    ):
        got = run_subtest(stranger, FakeNode([("boxctl", boxctl), ("is-active", active)]))
        check(got.startswith("passed") == passes,
              f"vm-checks: the stranger's subtest {'passes' if passes else 'fails'} a connection {what} ({got})")

    n = scenario_count()
    bwrap_suite = "the end-to-end scenario suite on bwrap, limits enforced"
    scope = "/sys/fs/cgroup/user.slice/user-900.slice/user@900.service/boxmaker.slice/boxmaker-s-c-1.scope"
    for what, found, passes in (("nothing left", "", True), ("a sandbox scope left", scope, False)):
        host = FakeNode([
            ("boxmaker-e2e-bwrap", f"bwrap: {n} passed, 0 failed\n{n} passed, 0 failed\n"),
            ("id -u boxmaker", "900\n"),
            ("user@900.service", found),
        ])
        # time.sleep of nothing_left() must not wait: the script imports time itself.
        import time as real_time
        saved, real_time.sleep = real_time.sleep, Time.sleep
        try:
            got = run_subtest(bwrap_suite, host)
        finally:
            real_time.sleep = saved
        check(got.startswith("passed") == passes,
              f"vm-checks: the leftover check after the suite on bwrap "
              f"{'passes' if passes else 'fails'} with {what} ({got[:200]})")
    toolset_vm_checks(run_subtest)
    if not FAILED:
        print("vm-checks: the stranger's refusal must be the socket's, the bwrap suite's "
              "leftover check sees bwrap's scopes, and the toolset subtests need make and git log to run")


def toolset_vm_checks(run_subtest):
    """The VM test's toolset subtests over fake nodes: they pass on what brokerd and the module
    answer when the toolset works, on each backend, and fail where make did not run, git is
    not there, or the Podman image is not the pinned one."""
    image = "sha256:" + "ab" * 32
    tree, listing = "/nix/store/x-boxmaker-toolset-build-0-root", "/nix/store/y-closure-info/store-paths"
    status = json.dumps({"kind": "status", "toolsets": [
        {"name": "build", "grants": ["proj"], "check": {"ok": True, "detail": "toolkit 0.1.0, busybox sh"}}]})
    configs = {
        "podman": f'[runner]\nimage = "sha256:{"cd" * 32}"\n[toolsets.build]\nimage = "{image}"\n',
        "bwrap": f'[bwrap]\ntools_root = "/nix/store/z-root"\n[toolsets.build]\ntree = "{tree}"\nstore_paths = "{listing}"\n',
    }
    made = "built by make\nmake=0\nmade on the toolset\ngit=0\n\n[exit 0]"

    def result(content):
        return json.dumps({"kind": "result", "content": content})

    def node(backend, shell=made, loaded=image):
        return FakeNode([
            (" status", status),
            ("cat /etc/boxmaker/brokerd.toml", configs[backend]),
            ("id -u boxmaker", "900\n"),
            ("podman image inspect", loaded.removeprefix("sha256:") + "\n"),
            ("--call c20", result("wrote 26 bytes to /srv/vm/proj/Makefile")),
            ("--call c21", result(shell)),
            ("--call c22", result("no-git\nno-make\n\n[exit 0]")),
            ("ControlGroup", "/system.slice/boxmaker.service\n"),
        ])

    titles = {
        "podman": "Podman, a toolset the module built: its image by ID, make and git log through the socket",
        "bwrap": "bwrap, a toolset the module built: its tree and store paths, make and git log through the socket",
    }
    for backend, title in titles.items():
        for what, fake, passes in (
            ("make and git log ran", node(backend), True),
            ("make failed", node(backend, shell="make: *** No rule to make target\nmake=2\n"), False),
            ("git is missing", node(backend, shell="built by make\nmake=0\nsh: git: not found\ngit=127\n"), False),
        ) + ((("another image is loaded", node(backend, loaded="sha256:" + "ef" * 32), False),)
             if backend == "podman" else ()):
            got = run_subtest(title, fake)
            check(got.startswith("passed") == passes,
                  f"vm-checks: the {backend} toolset subtest {'passes' if passes else 'fails'} when {what} ({got[:300]})")


def vm_units(packages_json):
    """The VM test's units on each node (the module's and the test's own) in a unit directory,
    as NixOS writes them ([Unit] dependencies and ordering, a .wants link per wantedBy; systemd
    adds the default dependencies itself), and `systemd-analyze verify multi-user.target`:
    the boot transaction must have no ordering cycle, which systemd breaks by dropping a job
    (a socket, a service or sockets.target itself) and then the test waits for a unit that
    never starts. Commands are /bin/true: only the order is checked here."""
    if shutil.which("systemd-analyze") is None:
        check(False, "vm-units: systemd-analyze is missing (apt-get install systemd)")
        return
    nodes = json.loads(Path(packages_json).read_text())["vmTest"]["units"]
    for node, units in sorted(nodes.items()):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            for kind, section in (("services", "Service"), ("sockets", "Socket")):
                for name, u in units[kind].items():
                    unit = f"{name}.{kind[:-1]}"
                    lines = ["[Unit]"]
                    lines += [f"{k}={toml_value(v) if isinstance(v, bool) else v}"
                              for k, v in u["unitConfig"].items() if not isinstance(v, list)]
                    for key, option in (("Requires", "requires"), ("Wants", "wants"),
                                        ("After", "after"), ("Before", "before")):
                        if u[option]:
                            lines.append(f"{key}={' '.join(u[option])}")
                    if kind == "services":
                        lines += ["[Service]", f"Type={u['Type']}", "ExecStart=/bin/true"]
                    else:
                        lines += ["[Socket]", f"ListenStream={u['ListenStream']}"]
                    (d / unit).write_text("\n".join(lines) + "\n")
                    for target in u["wantedBy"]:
                        (d / f"{target}.wants").mkdir(exist_ok=True)
                        os.symlink(f"../{unit}", d / f"{target}.wants" / unit)
            # The unit directory first, then systemd's own (the empty entry).
            r = run(["systemd-analyze", "verify", "--man=no", "multi-user.target"],
                    env={**os.environ, "SYSTEMD_UNIT_PATH": f"{d}:"})
            out = r.stdout + r.stderr
            cycles = [l for l in out.splitlines() if "ordering cycle" in l or "break ordering cycle" in l]
            check(r.returncode == 0 and not cycles,
                  f"vm-units: {node}: multi-user.target starts without an ordering cycle "
                  f"(exit {r.returncode}): {cycles or out.strip()}")
    if not FAILED:
        print(f"vm-units: the VM test's nodes ({', '.join(sorted(nodes))}) boot to multi-user.target "
              "without an ordering cycle (systemd-analyze verify)")


def undefined_names(source, extra):
    """Names a script reads that nothing in it, the driver or Python defines."""
    tree = ast.parse(source)
    defined = set(dir(builtins)) | DRIVER_GLOBALS | set(extra)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return sorted({n.id for n in ast.walk(tree)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in defined})


def check_profile(args):
    """The cargo profile the check phase builds the tests with, as nixpkgs' cargoCheckHook picks
    it (checkType, whose default is buildType, whose default is "release"; `--profile <it>`
    unless it is "debug", where `cargo test` takes its test profile), with the profiles it
    inherits from, nearest first, and its `lto` as Cargo.toml sets it (None: cargo's default,
    off)."""
    import tomllib
    profiles = tomllib.loads((ROOT / "Cargo.toml").read_text()).get("profile", {})
    check_type = args.get("checkType") or args.get("buildType") or "release"
    name = "test" if check_type == "debug" else check_type
    chain, lto = [], None
    while name and name not in chain:
        chain.append(name)
        conf = profiles.get(name, {})
        if lto is None and "lto" in conf:
            lto = conf["lto"]
        name = conf.get("inherits") or {"test": "dev", "bench": "release"}.get(name)
    return check_type, chain, lto


def packages(packages_json):
    data = json.loads(Path(packages_json).read_text())
    pk = data["packages"]
    # The check phase builds every crate again for its test binaries: not with the release
    # profile's fat LTO (Cargo.toml), which would make the first build of the package compile
    # the workspace twice at its slowest.
    for name in ("boxmaker", "crateTests"):
        args = pk[name]["args"]
        if args.get("doCheck") is not True:
            continue
        check_type, chain, lto = check_profile(args)
        check("release" not in chain and lto in (None, False, "off"),
              f"packages.{name}: the check phase builds its tests without the release profile "
              f"or LTO (checkType {check_type!r}: cargo profile {' <- '.join(chain)}, lto {lto!r}); "
              "set checkType = \"debug\" in nixos/pkgs/boxmaker.nix")
    for name in ("boxmaker", "toolkit", "e2e", "crateTests"):
        meta = pk[name]["args"].get("meta", {})
        for field in ("description", "license", "mainProgram", "platforms"):
            check(meta.get(field), f"packages.{name}: meta.{field} is set")
        # nixos/README.md, "Package metadata": maintainers is a list (empty: none in nixpkgs'
        # maintainer list), and no homepage but a real https address.
        check(isinstance(meta.get("maintainers"), list),
              f"packages.{name}: meta.maintainers is a list (not {meta.get('maintainers')!r})")
        homepage = meta.get("homepage")
        check(homepage is None or (
            isinstance(homepage, str) and re.fullmatch(r"https://[a-z0-9.-]+\.[a-z]{2,}(/\S*)?", homepage)
            and not re.search(r"OWNER|example\.|localhost|TODO|XXX", homepage, re.I)),
              f"packages.{name}: meta.homepage is left out or an https address, not a placeholder "
              f"(not {homepage!r})")
    # nixpkgs' convention: a package runs its tests, skipping what its build sandbox cannot run.
    check(pk["boxmaker"]["args"].get("doCheck") is True, "packages.boxmaker runs its tests (doCheck)")
    skips = [f for f in pk["boxmaker"]["args"].get("checkFlags", []) if f.startswith("--skip=")]
    check(skips != [], "packages.boxmaker has a skip list (checkFlags --skip=...) for what the sandbox cannot run")
    # The tools image is an archive: its ID is read from it, never by running it as a stream
    # script (nixpkgs' buildLayeredImage carries its stream's isExe = true).
    script = pk["toolsImageIdScript"]
    check(f"image-id.sh {pk['toolsImagePath']} > $out/image-id" in script and "--stream" not in script,
          f"packages.tools-image-id reads the image's archive ({script!r})")
    vm = data["vmTest"]
    check(vm["globalTimeout"] >= 3600 and vm["meta"].get("timeout") == vm["globalTimeout"],
          f"the VM test's globalTimeout ({vm['globalTimeout']}) fits two suites and meta.timeout says the same")
    try:
        compile(vm["testScript"], "testScript", "exec")
    except SyntaxError as e:
        check(False, f"the VM test's script compiles: {e}")
        return
    missing = undefined_names(vm["testScript"], vm["nodes"])
    check(missing == [], f"the VM test's script defines every name it reads (not: {missing})")
    if not FAILED:
        print(f"packages: meta (maintainers a list, homepage {pk['boxmaker']['args']['meta'].get('homepage') or 'left out'}), tests and skip list of {', '.join(('boxmaker', 'toolkit', 'e2e'))}, "
              f"tests built in cargo's {check_profile(pk['boxmaker']['args'])[1][0]} profile; "
              f"the VM test's script ({len(vm['testScript'].splitlines())} lines) compiles")


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
        # Its own loop, from `applets=0` to the check after it, run over an empty /bin.
        src = (ROOT / "images/build-tools-image.sh").read_text()
        loop = src[src.index("applets=0\n"):src.index('[ -L "$new/bin/sh" ]')]
        deb = tmp / "debian"
        (deb / "bin").mkdir(parents=True)
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", loop], env={**os.environ, "new": str(deb)},
                           capture_output=True, text=True)
        check(r.returncode == 0, f"images: build-tools-image.sh's applet loop runs ({r.stderr.strip()})")
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


def main(argv):
    cmd, args = argv[1], argv[2:]
    {"lock": lock, "outputs": outputs, "scripts": scripts, "module": module, "units": units,
     "packages": packages, "images": images, "vm-units": vm_units,
     "suites": suites, "vm-checks": vm_checks}[cmd](*args)
    if FAILED:
        print(f"{cmd}: {len(FAILED)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
