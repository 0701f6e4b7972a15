"""`check.py module`: nixos/module.nix as eval-module.nix evaluated it (the units, the service
user, Podman or bwrap, toolsets, the options' documentation and the bad configurations), and,
with a brokerd binary, its defaults and `brokerd check-config` on the generated configs."""
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from checklib import UNITS, check, run, toml_value, FAILED

PLACEHOLDER = "@BOXMAKER_IMAGE_ID@"


def fill(v, vals):
    if isinstance(v, str):
        for k, x in vals.items():
            v = v.replace(f"@{k}@", x)
        return v
    if isinstance(v, list):
        return [fill(x, vals) for x in v]
    return v


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
