# flake.nix's inputs and the names of its outputs, evaluated with nixpkgs' lib and a stub
# package set (no nixpkgs here): only names are forced, never a package.
#
#   nix-instantiate --eval --strict --json nixos/checks/flake-outputs.nix --arg lib 'import $NIXPKGS_LIB'
# Without lib, only the inputs are given (flake.lock's check needs no more).
{
  lib ? null,
}:
let
  flake = import ../../flake.nix;
  systems = [
    "x86_64-linux"
    "aarch64-linux"
  ];
  nixpkgs = {
    inherit lib;
    legacyPackages = lib.genAttrs systems (system: {
      stdenv.hostPlatform.system = system;
    });
  };
  outputs = flake.outputs {
    self = outputs;
    inherit nixpkgs;
  };
  names = lib.mapAttrs (_: lib.attrNames);
in
{
  inputs = flake.inputs;
}
// (
  if lib == null then
    { }
  else
    {
      packages = names outputs.packages;
      checks = names outputs.checks;
      devShells = names outputs.devShells;
      nixosModules = lib.attrNames outputs.nixosModules;
      overlays = lib.attrNames outputs.overlays;
    }
)
