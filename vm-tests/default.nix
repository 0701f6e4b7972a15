# NixOS VM tests, run by `nix flake check` (flake.nix's checks.<system>.vm-boxmaker).
{
  pkgs,
  # flake.nix's packages.<system>: boxmaker, toolkit, e2e.
  packages,
}:
{
  vm-boxmaker = pkgs.testers.runNixOSTest (import ./boxmaker.nix { inherit pkgs packages; });
}
