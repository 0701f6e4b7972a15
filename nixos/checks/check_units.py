"""`check.py units` and `vm-units`: systemd-analyze on dist/systemd's units, alone and with the
bwrap drop-in, and on the VM test's units of each node (no ordering cycle)."""
import json
import os
import shutil
import tempfile
from pathlib import Path

from checklib import ROOT, UNITS, check, run, toml_value, FAILED


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
