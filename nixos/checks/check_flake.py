"""`check.py lock`, `outputs` and `packages`: flake.lock, flake.nix's output names, and the
flake's packages as eval-packages.nix evaluated them (nixpkgs' conventions, the VM test's
script)."""
import ast
import builtins
import json
import re
from pathlib import Path

from checklib import ROOT, check, FAILED


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


# What the NixOS test driver gives a test script besides its own names.
DRIVER_GLOBALS = {"start_all", "subtest", "machines", "driver", "log", "join_all", "serial_stdout_on",
                  "serial_stdout_off", "retry", "polling_condition", "create_machine", "vlans",
                  "t", "os", "Machine"}


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
