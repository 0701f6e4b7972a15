"""What every check of check.py shares: the repository's root, nixos/units.json, the list of
failed checks and how one is recorded, and two small helpers."""
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNITS = json.loads((ROOT / "nixos/units.json").read_text())
FAILED = []


def check(ok, what):
    if not ok:
        FAILED.append(what)
        print(f"  FAIL {what}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


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
