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
import sys

# The subcommands live in the modules beside this file (checklib.py holds what they share);
# importing them leaves no __pycache__ in the repository.
sys.dont_write_bytecode = True

from checklib import FAILED  # noqa: E402
from check_flake import lock, outputs, packages  # noqa: E402
from check_images import images  # noqa: E402
from check_module import module  # noqa: E402
from check_scripts import scripts  # noqa: E402
from check_units import units, vm_units  # noqa: E402
from check_vm import suites, vm_checks  # noqa: E402


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
