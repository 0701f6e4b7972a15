#!/usr/bin/env bash
# `make nix-check`: what can be checked of the Nix side without a Nix build (no binary cache,
# no nixpkgs here). With Debian's nix-bin (installed when missing, which needs root):
#   1. every .nix file parses (nix-instantiate --parse)
#   2. flake.lock is JSON version 7 whose root inputs are flake.nix's
#   3. dist/systemd's units and the bwrap drop-in are what nixos/units.json generates, and,
#      where systemd-analyze is installed, it accepts them (the service alone and with the
#      drop-in) and shows the drop-in in effect
#   4. nixos/pkgs/image-id.sh and load-image.sh against a synthetic image and a fake podman,
#      as an archive and as a stream script (a toolset's image)
#   5. with NIXPKGS_LIB=/path/to/nixpkgs/lib (or a checkout holding lib/, or its git
#      directory): flake.nix's output names, and nixos/module.nix through lib.evalModules
#      against stubs of the NixOS options it touches (a minimal and a full Podman
#      configuration, one with its own base seccomp profile, bwrap with cgroup = "delegated"
#      and with "systemd-scope", two toolsets on each backend, and bad ones that must fail);
#      with a brokerd binary (BROKERD, or target/{debug,release}/brokerd) the
#      configs the module checks at build time go through `brokerd check-config`
#   6. with NIXPKGS_LIB: the flake's packages and checks evaluated against stubs of the nixpkgs
#      builders they call (nixos/checks/stub-pkgs.nix, which refuse arguments nixpkgs does not
#      take): nixpkgs' conventions (meta, tests with a skip list, built without the release
#      profile's LTO), the VM test's script compiles
#      and names nothing undefined, each VM node's units (the module's and the test's own)
#      boot to multi-user.target without an ordering cycle (systemd-analyze verify), and the
#      tools image's two trees, laid out by the
#      expression's own scripts over stand-ins, hold every program of images/programs.txt, and
#      a toolset's tree and image root run its programs with only its closure bound
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf 'nix-check: %s\n' "$*"; }

if ! command -v nix-instantiate >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "nix-check: nix-instantiate is missing; install nix-bin (apt-get install nix-bin) or run as root" >&2
        exit 1
    fi
    say "installing nix-bin"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nix-bin >/dev/null
fi
# systemd-analyze, for the units' checks (3, and the VM test's boot order in 6).
if ! command -v systemd-analyze >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "nix-check: systemd-analyze is missing; install systemd (apt-get install systemd) or run as root" >&2
        exit 1
    fi
    say "installing systemd (systemd-analyze)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
# No daemon and no store writes: evaluation only, as any user.
nixi() { nix-instantiate --store dummy:// --readonly-mode "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1
n=0
while IFS= read -r -d '' f; do
    nixi --parse "$f" >/dev/null || { echo "nix-check: $f does not parse" >&2; exit 1; }
    n=$((n + 1))
done < <(find . -name '*.nix' -not -path './target/*' -not -path './build/*' -not -path './.git/*' -print0)
say "$n .nix files parse"

# 2
nixi --eval --strict --json nixos/checks/flake-outputs.nix -A inputs >"$tmp/inputs.json"
python3 nixos/checks/check.py lock "$tmp/inputs.json"

# 3
python3 dist/systemd/generate.py --check
python3 nixos/checks/check.py units

# 4
python3 nixos/checks/check.py scripts

# 5
# Without NIXPKGS_LIB: the copy of nixpkgs' lib beside the repository, where there is one.
if [ -z "${NIXPKGS_LIB:-}" ] && [ -f ../shared/nixpkgs-lib/lib/default.nix ]; then
    NIXPKGS_LIB=$(cd ../shared/nixpkgs-lib && pwd)
    say "NIXPKGS_LIB is unset: evaluating against $NIXPKGS_LIB ($(tr '\n' ' ' <"$NIXPKGS_LIB/SOURCE.md" 2>/dev/null | grep -o 'commit [0-9a-f]\{40\}' || echo 'no SOURCE.md'))"
fi
if [ -z "${NIXPKGS_LIB:-}" ]; then
    say "SKIPPED the flake outputs and the module evaluation: set NIXPKGS_LIB to nixpkgs' lib/ directory, a checkout holding it (NixOS/nixpkgs, nix-community/nixpkgs.lib) or its git directory, to run them"
    exit 0
fi
# nixpkgs' lib/ itself, a checkout that holds it (NixOS/nixpkgs, nix-community/nixpkgs.lib), or
# such a repository's git directory, whose committed lib/ is taken.
if [ ! -f "$NIXPKGS_LIB/default.nix" ] && [ -f "$NIXPKGS_LIB/lib/default.nix" ]; then
    NIXPKGS_LIB=$NIXPKGS_LIB/lib
elif [ ! -f "$NIXPKGS_LIB/default.nix" ] &&
    git --git-dir="$NIXPKGS_LIB" cat-file -e HEAD:lib/default.nix 2>/dev/null; then
    mkdir "$tmp/nixpkgs"
    git --git-dir="$NIXPKGS_LIB" archive HEAD lib | tar -x -C "$tmp/nixpkgs"
    say "nixpkgs lib from the git directory $NIXPKGS_LIB at $(git --git-dir="$NIXPKGS_LIB" rev-parse --short HEAD)"
    NIXPKGS_LIB=$tmp/nixpkgs/lib
fi
[ -f "$NIXPKGS_LIB/default.nix" ] || { echo "nix-check: NIXPKGS_LIB=$NIXPKGS_LIB has no default.nix (nor lib/default.nix)" >&2; exit 1; }
lib="import $(cd "$NIXPKGS_LIB" && pwd)"
nixi --eval --strict --json nixos/checks/flake-outputs.nix --arg lib "$lib" >"$tmp/outputs.json"
python3 nixos/checks/check.py outputs "$tmp/outputs.json"
nixi --eval --strict --json nixos/checks/eval-module.nix --arg lib "$lib" >"$tmp/eval.json"
brokerd=${BROKERD:-}
for b in target/debug/brokerd target/release/brokerd; do
    [ -n "$brokerd" ] || { [ -x "$b" ] && brokerd=$b; } || true
done
python3 nixos/checks/check.py module "$tmp/eval.json" ${brokerd:+"$brokerd"}

# 6
nixi --eval --strict --json nixos/checks/eval-packages.nix --arg lib "$lib" >"$tmp/packages.json"
python3 nixos/checks/check.py packages "$tmp/packages.json"
python3 nixos/checks/check.py vm-units "$tmp/packages.json"
python3 nixos/checks/check.py suites "$tmp/packages.json"
python3 nixos/checks/check.py vm-checks "$tmp/packages.json"
python3 nixos/checks/check.py images "$tmp/packages.json"
say "all passed"
