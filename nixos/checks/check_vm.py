"""`check.py suites` and `vm-checks`: the suite's verdicts (tests/e2e/suite-tally.sh and the VM
test's suite()) over stand-ins, and subtests of the VM test over fake nodes."""
import ast
import json
import re
import shlex
import shutil
import tempfile
from pathlib import Path

from checklib import ROOT, check, run, FAILED


def scenario_count():
    """The scenarios a run on one backend has: the entries of the table in
    tests/e2e/src/scenarios.rs, a `match backend` entry once, as vm-tests/e2e.nix counts them."""
    text = (ROOT / "tests/e2e/src/scenarios.rs").read_text()
    table = text.split("let scenarios", 1)[1].split("];", 1)[0]
    return table.count("Suite::") - table.count("Backend::Bwrap =>")


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
