{
  description = "boxmaker: an agent's tool calls in fresh rootless Podman sandboxes, decided by the owner's grants";

  # Pinned in flake.lock to a nixos-26.05 revision.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      hasE2e = builtins.pathExists ./tests/e2e/Cargo.toml;
    in
    {
      packages = forAllSystems (
        pkgs:
        let
          crate = ./nixos/pkgs/boxmaker.nix;
        in
        rec {
          # brokerd and boxctl: one build of the workspace, its tests in the check phase.
          boxmaker = pkgs.callPackage crate { };
          brokerd = boxmaker;
          boxctl = lib.addMetaAttrs { mainProgram = "boxctl"; } boxmaker;
          # The static musl toolkit; the build fails unless it has no INTERP and no NEEDED.
          toolkit = pkgs.pkgsStatic.callPackage crate {
            pname = "boxmaker-toolkit";
            crates = [ "toolkit" ];
            runTests = false;
            requireStatic = true;
          };
          tools-image = pkgs.callPackage ./images/tools-image.nix { inherit toolkit; };
          # $out/image-id: the ID Podman gives tools-image, sha256:<64 hex>.
          tools-image-id = pkgs.callPackage ./nixos/pkgs/image-id.nix { image = tools-image; };
          default = boxmaker;
        }
        // lib.optionalAttrs hasE2e {
          # The end-to-end scenario suite, static so that it runs in any guest.
          e2e = pkgs.pkgsStatic.callPackage crate {
            pname = "boxmaker-e2e";
            crates = [ "boxmaker-e2e" ];
            runTests = false;
            requireStatic = true;
          };
        }
      );

      # pkgs.boxmaker, which the module's package option takes where it is there.
      overlays.default = final: _prev: { boxmaker = final.callPackage ./nixos/pkgs/boxmaker.nix { }; };

      nixosModules.default = ./nixos/module.nix;
      nixosModules.boxmaker = ./nixos/module.nix;

      checks = forAllSystems (
        pkgs:
        let
          p = self.packages.${pkgs.stdenv.hostPlatform.system};
        in
        {
          # The package itself: its check phase is `cargo test --workspace`.
          crate-tests = p.boxmaker;
          toolkit-static = pkgs.runCommand "boxmaker-toolkit-static" {
            nativeBuildInputs = [ pkgs.binutils-unwrapped ];
          } "bash ${./scripts/static-check.sh} ${p.toolkit}/bin/toolkit && touch $out";
          tools-image-id = p.tools-image-id;
          # The committed dist/systemd units are what nixos/units.json generates.
          units =
            pkgs.runCommand "boxmaker-units"
              {
                nativeBuildInputs = [ pkgs.python3 ];
                src = lib.fileset.toSource {
                  root = ./.;
                  fileset = lib.fileset.unions [
                    ./nixos/units.json
                    ./dist/systemd
                  ];
                };
              }
              ''
                cp -r $src work && chmod -R u+w work
                python3 work/dist/systemd/generate.py --check
                touch $out
              '';
        }
        // lib.optionalAttrs hasE2e (import ./vm-tests { inherit pkgs; packages = p; })
      );

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          inputsFrom = [ self.packages.${pkgs.stdenv.hostPlatform.system}.boxmaker ];
          packages = with pkgs; [
            rustfmt
            clippy
            podman
            jq
            python3
            binutils
          ];
        };
      });
    };
}
