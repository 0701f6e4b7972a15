# Stub declarations of the NixOS options that nixos/module.nix and the VM test's nodes
# (vm-tests/boxmaker.nix) set or read, for lib.evalModules without nixpkgs (not available
# here): each with the name and a type close to NixOS's, so that a misspelt option or a value
# of the wrong shape fails the evaluation. Used by eval-module.nix and eval-packages.nix.
{ lib }:
let
  inherit (lib) mkOption types;

  fakeDrv =
    name: extra:
    {
      type = "derivation";
      inherit name;
      outPath = "/nix/store/00000000000000000000000000000000-${name}";
    }
    // extra;

  # NixOS's unitOption: a scalar or a list of them.
  unitScalar = types.oneOf [
    types.bool
    types.int
    types.str
    types.path
  ];
  unitValue = types.either unitScalar (types.listOf unitScalar);
in
{ config, ... }:
{
  options = {
    # The VM test's nodes also set these (vm-tests/boxmaker.nix).
    virtualisation.memorySize = mkOption {
      type = types.ints.positive;
      default = 1024;
    };
    virtualisation.diskSize = mkOption {
      type = types.ints.positive;
      default = 1024;
    };
    boot.kernelModules = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    networking.nameservers = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    assertions = mkOption {
      type = types.listOf (
        types.submodule {
          options.assertion = mkOption { type = types.bool; };
          options.message = mkOption { type = types.str; };
        }
      );
      default = [ ];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    security.allowUserNamespaces = mkOption {
      type = types.bool;
      default = true;
    };
    users.users = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule {
          options = {
            isNormalUser = mkOption {
              type = types.bool;
              default = false;
            };
            extraGroups = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            isSystemUser = mkOption {
              type = types.bool;
              default = false;
            };
            group = mkOption { type = types.str; };
            description = mkOption {
              type = types.str;
              default = "";
            };
            home = mkOption { type = types.str; };
            createHome = mkOption {
              type = types.bool;
              default = false;
            };
            homeMode = mkOption {
              type = types.strMatching "[0-7]{1,5}";
              default = "700";
            };
            linger = mkOption {
              type = types.nullOr types.bool;
              default = null;
            };
            autoSubUidGidRange = mkOption {
              type = types.bool;
              default = false;
            };
            subUidRanges = mkOption {
              type = types.listOf (
                types.submodule {
                  options.startUid = mkOption { type = types.int; };
                  options.count = mkOption { type = types.int; };
                }
              );
              default = [ ];
            };
            subGidRanges = mkOption {
              type = types.listOf (
                types.submodule {
                  options.startGid = mkOption { type = types.int; };
                  options.count = mkOption { type = types.int; };
                }
              );
              default = [ ];
            };
          };
        }
      );
    };
    users.groups = mkOption {
      default = { };
      type = types.attrsOf (types.submodule { });
    };
    virtualisation.podman.enable = mkOption {
      type = types.bool;
      default = false;
    };
    virtualisation.containers.enable = mkOption {
      type = types.bool;
      default = false;
    };
    services.userborn.enable = mkOption {
      type = types.bool;
      default = false;
    };
    # nixos-26.05's userborn, which writes no sub-IDs (nixos/README.md); a host of a later
    # nixpkgs has 1.0 or later.
    services.userborn.package = mkOption {
      type = types.package;
      default = fakeDrv "userborn-0.4.0" { version = "0.4.0"; };
    };
    systemd.sysusers.enable = mkOption {
      type = types.bool;
      default = false;
    };
    virtualisation.podman.package = mkOption {
      type = types.package;
      default = fakeDrv "podman" {
        meta.mainProgram = "podman";
        src = fakeDrv "podman-src" { };
      };
    };
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };
    environment.etc = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule (
          { name, config, options, ... }:
          {
            options.source = mkOption {
              type = types.nullOr types.path;
              default = null;
            };
            options.text = mkOption {
              type = types.nullOr types.lines;
              default = null;
            };
            # "symlink" (a link into /etc/static) or a mode, which makes it a copied file.
            options.mode = mkOption {
              type = types.str;
              default = "symlink";
            };
            # As NixOS's etc module: text becomes the source at the priority text was
            # defined with, so a host's own source of higher priority replaces it, and one of
            # the same priority conflicts with it.
            config.source = lib.mkIf (config.text != null) (
              lib.mkDerivedConfig options.text (text: fakeDrv "etc-${name}" { inherit text; })
            );
          }
        )
      );
    };
    systemd.tmpfiles.rules = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    systemd.sockets = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule {
          options = {
            unitConfig = mkOption {
              type = types.attrsOf unitValue;
              default = { };
            };
            socketConfig = mkOption {
              type = types.attrsOf unitValue;
              default = { };
            };
            wantedBy = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
          };
        }
      );
    };
    systemd.services = mkOption {
      default = { };
      type = types.attrsOf (
        types.submodule {
          options = {
            unitConfig = mkOption {
              type = types.attrsOf unitValue;
              default = { };
            };
            serviceConfig = mkOption {
              type = types.attrsOf unitValue;
              default = { };
            };
            description = mkOption {
              type = types.str;
              default = "";
            };
            requires = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            after = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            wants = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            path = mkOption {
              type = types.listOf (types.either types.package types.str);
              default = [ ];
            };
            before = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            wantedBy = mkOption {
              type = types.listOf types.str;
              default = [ ];
            };
            preStart = mkOption {
              type = types.lines;
              default = "";
            };
            restartTriggers = mkOption {
              type = types.listOf types.unspecified;
              default = [ ];
            };
          };
        }
      );
    };
  };
}
